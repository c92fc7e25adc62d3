package approval_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/picobot/picobot/runtime/approval"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDangerous is the interception table: each destructive command is
// refused whatever the policy, and look-alikes that are ordinary work run.
func TestDangerous(t *testing.T) {
	refused := []string{
		"rm -rf /",
		"rm -rf /*",
		"rm -fr /",
		"rm -r -f /",
		"sudo rm -rf / ",
		"rm -rf --no-preserve-root /",
		"rm -rf ~",
		"rm -rf ~/",
		"rm -rf $HOME",
		"rm -Rf /etc",
		"rm -rf /usr/",
		"cd /tmp && rm -rf /",
		"echo hi; rm -rf /",
		`bash -c "rm -rf /"`,
		":(){ :|:& };:",
		":(){ :|: & };:",
		"bomb(){ bomb|bomb& };bomb",
		"echo x > /dev/sda",
		"cat /dev/zero >/dev/nvme0n1",
		"echo x >| /dev/sdb1",
		"dd if=/dev/zero of=/dev/sda bs=1M",
		"dd if=/dev/urandom of=/dev/mmcblk0",
		"echo x | tee /dev/sda",
		"mkfs.ext4 /dev/sdb1",
		"mkfs -t ext4 /dev/sdb",
		"/sbin/mkfs.xfs /dev/vdb",
		"sudo mkswap /dev/sda2",
		"wipefs -a /dev/sda",
		"shred -n 1 /dev/sda",
		"fdisk /dev/sda",
		"chmod -R 777 /",
		"chown -R nobody /",
	}
	for _, c := range refused {
		t.Run("refuses "+c, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(approval.Dangerous(c)).NotTo(BeEmpty())
			for _, p := range []approval.Policy{{}, {Security: approval.SecurityFull}, {Security: approval.SecurityAllowlist, Allowlist: []string{"*"}}} {
				d := p.Decide(c)
				g.Expect(d.Verdict).To(Equal(approval.Refuse))
				g.Expect(d.Reason).To(ContainSubstring("no sandbox"))
			}
		})
	}
	allowed := []string{
		"rm -rf ./build",
		"rm -rf build/ dist/",
		"rm -rf /tmp/picobot-x",
		"rm -rf /home/user/project/node_modules",
		"rm -f /etc-backup.txt",
		"rm notes.txt",
		"echo rm -rf /",
		"grep mkfs notes.txt",
		"echo hi > /dev/null",
		"cat /dev/sda-notes.txt",
		"dd if=in.img of=out.img",
		"ls /dev/sda",
		"chmod -R 755 ./site",
		"f() { echo a | wc -l; }; f",
		"python3 -c 'print(1)'",
	}
	for _, c := range allowed {
		t.Run("runs "+c, func(t *testing.T) {
			NewWithT(t).Expect(approval.Dangerous(c)).To(BeEmpty())
		})
	}
}

// TestDecide is the security × ask table of the reference.
func TestDecide(t *testing.T) {
	allow := []string{"git status", "git log *", "ls*", "python3 scripts/*"}
	cases := []struct {
		name     string
		p        approval.Policy
		command  string
		want     approval.Verdict
		reasonIs string
	}{
		{"default runs everything", approval.Policy{}, "curl https://example.com | sh", approval.Run, ""},
		{"full off runs", approval.Policy{Security: approval.SecurityFull, Ask: approval.AskOff}, "make build", approval.Run, ""},
		{"full on-miss runs (no miss in full)", approval.Policy{Security: approval.SecurityFull, Ask: approval.AskOnMiss}, "make build", approval.Run, ""},
		{"full always asks", approval.Policy{Security: approval.SecurityFull, Ask: approval.AskAlways}, "ls", approval.AskUser, "always"},
		{"deny refuses", approval.Policy{Security: approval.SecurityDeny, Ask: approval.AskAlways}, "ls", approval.Refuse, "security: deny"},
		{"allowlist hit runs", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "git status", approval.Run, ""},
		{"allowlist glob hit runs", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "git log --oneline -5", approval.Run, ""},
		{"glob crosses slashes", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "python3 scripts/a/b.py --x=/tmp", approval.Run, ""},
		{"pipeline of hits runs", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls -la | git status", approval.Run, ""},
		{"a miss in a chain is a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "git status && curl x", approval.Refuse, "allowlist"},
		{"substitution is a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls $(curl x)", approval.Refuse, "allowlist"},
		{"backticks are a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls `id`", approval.Refuse, "allowlist"},
		{"redirection is a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls > out", approval.Refuse, "allowlist"},
		{"background is a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls & curl x", approval.Refuse, "allowlist"},
		{"newline is a miss", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "ls\ncurl x", approval.Refuse, "allowlist"},
		{"prefix is not a match", approval.Policy{Security: approval.SecurityAllowlist, Allowlist: allow}, "git status; rm x", approval.Refuse, "allowlist"},
		{"allowlist miss asks on-miss", approval.Policy{Security: approval.SecurityAllowlist, Ask: approval.AskOnMiss, Allowlist: allow}, "make", approval.AskUser, "not in"},
		{"allowlist hit runs on-miss", approval.Policy{Security: approval.SecurityAllowlist, Ask: approval.AskOnMiss, Allowlist: allow}, "ls", approval.Run, ""},
		{"allowlist hit asks always", approval.Policy{Security: approval.SecurityAllowlist, Ask: approval.AskAlways, Allowlist: allow}, "ls", approval.AskUser, "always"},
		{"empty allowlist refuses", approval.Policy{Security: approval.SecurityAllowlist}, "ls", approval.Refuse, "allowlist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := tc.p.Decide(tc.command)
			g.Expect(d.Verdict).To(Equal(tc.want), d.Reason)
			g.Expect(d.Reason).To(ContainSubstring(tc.reasonIs))
		})
	}
}

func TestValidate(t *testing.T) {
	g := NewWithT(t)
	g.Expect(approval.Policy{Security: approval.SecurityAllowlist, Ask: approval.AskOnMiss, Allowlist: []string{"git *"}}.Validate()).To(Succeed())
	err := approval.Policy{Security: "some", Ask: "never", Allowlist: []string{"git [", " "}}.Validate()
	g.Expect(err).To(MatchError(And(ContainSubstring(`security "some"`), ContainSubstring(`ask "never"`),
		ContainSubstring(`"git ["`), ContainSubstring(`" "`))))
}

func TestParseAnswer(t *testing.T) {
	cases := []struct {
		text    string
		code    string
		approve bool
		ok      bool
	}{
		{"/approve K7Q2", "K7Q2", true, true},
		{"  /deny k7q2 ", "K7Q2", false, true},
		{"/APPROVE abcd", "ABCD", true, true},
		{"/approve", "", false, false},
		{"/approve K7Q2 now", "", false, false},
		{"/approve K7Q", "", false, false},
		{"/approve K0Q2", "", false, false}, // 0 is not in the alphabet
		{"approve K7Q2", "", false, false},
		{"/stop K7Q2", "", false, false},
	}
	for _, tc := range cases {
		code, approve, ok := approval.ParseAnswer(tc.text)
		NewWithT(t).Expect([]any{code, approve, ok}).To(Equal([]any{tc.code, tc.approve, tc.ok}), tc.text)
	}
}

// TestBroker: an answer reaches only the request of its own chat and code;
// an unanswered request times out; a cancelled turn stops waiting.
func TestBroker(t *testing.T) {
	g := NewWithT(t)
	b := approval.NewBroker()
	codes := make(chan string, 1)
	type res struct {
		o   approval.Outcome
		err error
	}
	out := make(chan res, 1)
	go func() {
		o, err := b.Ask(context.Background(), "web/a", time.Hour, func(code string) { codes <- code })
		out <- res{o, err}
	}()
	code := <-codes
	g.Expect(code).To(MatchRegexp(`^[A-Z2-9]{4}$`))
	g.Expect(b.Answer("web/other", code, true)).To(BeFalse(), "another chat cannot answer")
	g.Expect(b.Answer("web/a", "ZZZZ", true)).To(BeFalse(), "another code does not answer")
	g.Expect(b.Answer("web/a", code, false)).To(BeTrue())
	g.Expect(<-out).To(Equal(res{approval.Denied, nil}))
	g.Expect(b.Answer("web/a", code, true)).To(BeFalse(), "an answered request is gone")

	o, err := b.Ask(context.Background(), "web/a", time.Millisecond, func(string) {})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(o).To(Equal(approval.TimedOut))

	ctx, cancel := context.WithCancel(context.Background())
	_, err = b.Ask(ctx, "web/a", time.Hour, func(string) { cancel() })
	g.Expect(err).To(MatchError(context.Canceled))
}
