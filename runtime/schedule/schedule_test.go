package schedule

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	picobotv1alpha1 "github.com/picobot/picobot/api/v1alpha1"
)

func ptr[T any](v T) *T { return &v }

func TestParseAndNext(t *testing.T) {
	anchor := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 30, 10, 2, 30, 0, time.UTC)
	cases := []struct {
		name    string
		s       picobotv1alpha1.Schedule
		want    time.Time
		wantErr string
	}{
		{name: "cron daily 09:00 UTC", s: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *"},
			want: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)},
		{name: "cron in Asia/Shanghai", s: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Asia/Shanghai"},
			want: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)},
		{name: "cron with seconds", s: picobotv1alpha1.Schedule{Cron: "15 * * * * *"},
			want: time.Date(2026, 11, 30, 10, 3, 15, 0, time.UTC)},
		{name: "cron weekdays by name", s: picobotv1alpha1.Schedule{Cron: "0 30 8 * * MON-FRI"},
			want: time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC)},
		{name: "descriptor", s: picobotv1alpha1.Schedule{Cron: "@hourly"},
			want: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)},
		{name: "every 5 minutes from anchor", s: picobotv1alpha1.Schedule{Every: ptr(int64(300000))},
			want: time.Date(2026, 11, 30, 10, 5, 0, 0, time.UTC)},
		{name: "at in the future", s: picobotv1alpha1.Schedule{At: ptr(anchor.Add(time.Hour).UnixMilli())},
			want: anchor.Add(time.Hour)},
		{name: "at in the past never fires", s: picobotv1alpha1.Schedule{At: ptr(anchor.UnixMilli())},
			want: time.Time{}},
		{name: "5 fields", s: picobotv1alpha1.Schedule{Cron: "0 9 * * *"}, wantErr: "has 5 fields; want 6"},
		{name: "bad field", s: picobotv1alpha1.Schedule{Cron: "0 0 25 * * *"}, wantErr: "invalid cron"},
		{name: "never fires", s: picobotv1alpha1.Schedule{Cron: "0 0 0 30 2 *"}, wantErr: "never fires"},
		{name: "unknown tz", s: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", TZ: "Mars/Olympus"}, wantErr: `unknown time zone "Mars/Olympus"`},
		{name: "tz inside expression", s: picobotv1alpha1.Schedule{Cron: "CRON_TZ=UTC 0 0 9 * *"}, wantErr: "set the time zone with tz"},
		{name: "every below floor", s: picobotv1alpha1.Schedule{Every: ptr(int64(59999))}, wantErr: "at least 60000 ms"},
		{name: "none set", s: picobotv1alpha1.Schedule{}, wantErr: "exactly one of"},
		{name: "two set", s: picobotv1alpha1.Schedule{Cron: "0 0 9 * * *", Every: ptr(int64(60000))}, wantErr: "exactly one of"},
		{name: "tz without cron", s: picobotv1alpha1.Schedule{Every: ptr(int64(60000)), TZ: "UTC"}, wantErr: "tz applies only"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s, err := Parse(tc.s, anchor)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Next(now).Equal(tc.want)).To(BeTrue(), "next = %v, want %v", s.Next(now), tc.want)
		})
	}
}

func TestEveryIsStableAcrossCalls(t *testing.T) {
	g := NewWithT(t)
	anchor := time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC)
	s, err := Parse(picobotv1alpha1.Schedule{Every: ptr(int64(3600000))}, anchor)
	g.Expect(err).NotTo(HaveOccurred())
	// Any instant inside one interval maps to the same next tick: status computed
	// at different moments does not flap.
	base := time.Date(2026, 6, 1, 12, 0, 7, 0, time.UTC)
	want := base.Add(time.Hour)
	for _, off := range []time.Duration{0, time.Second, 30 * time.Minute, time.Hour - time.Nanosecond} {
		g.Expect(s.Next(base.Add(off))).To(Equal(want))
	}
	g.Expect(s.Next(anchor.Add(-time.Hour))).To(Equal(anchor.Add(time.Hour)))
}
