package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/client-go/kubernetes"

	"github.com/picobot/picobot/runtime/provider/fakellm"
	"github.com/picobot/picobot/test/controlplane"
	"github.com/picobot/picobot/test/podrunner"
	"github.com/picobot/picobot/test/services"
)

const (
	// runtimeImage and browserImage are the image names the pod runner
	// maps to the picobot binary.
	runtimeImage = "local/picobot:dev"
	browserImage = "local/picobot-browser:dev"
	// systemNamespace is the gateway's, where the operator publishes the
	// tenants' API-key hashes.
	systemNamespace = "picobot-system"
	// agentName is the example Agent.
	agentName = "chat"
)

type options struct {
	state, kubeconfig, picobot, operator, addr, namespace, samples string
	fakeLLM                                                        bool
	model                                                          model
}

// stack is what run started, stopped in reverse order.
type stack struct {
	o       options
	env     *controlplane.Environment
	conn    []string // connection environment of the gateway, operator and migrations
	kubectl string
	stops   []func()
}

func (s *stack) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// run brings the cluster up, prints how to reach it on out, and keeps it
// running until ctx ends.
func run(ctx context.Context, o options, out io.Writer) error {
	s := &stack{o: o}
	defer s.stop()
	for _, bin := range []*string{&o.picobot, &o.operator} {
		abs, err := filepath.Abs(*bin)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("failed to find binary %q (make build makes it): %w", *bin, err)
		}
		*bin = abs
	}
	s.o = o
	if err := os.RemoveAll(o.state); err != nil {
		return fmt.Errorf("failed to empty %q: %w", o.state, err)
	}
	if err := os.MkdirAll(filepath.Join(o.state, "pods"), 0o700); err != nil {
		return fmt.Errorf("failed to create %q: %w", o.state, err)
	}
	progress := func(what string) { fmt.Fprintln(os.Stderr, "localcluster:", what) }

	progress("starting kube-apiserver and etcd (built once into the cache)")
	if err := s.controlPlane(); err != nil {
		return err
	}
	progress("starting PostgreSQL, Redis and an S3-protocol server (hack/postgres.sh, redis.sh, s3.sh)")
	apiKey, err := s.services(ctx)
	if err != nil {
		return err
	}
	llmURL := ""
	if o.model.key == "" {
		llm, err := fakellm.Listen("127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("failed to start the demo model: %w", err)
		}
		llm.Respond(fakellm.Demo)
		s.stops = append(s.stops, llm.Close)
		llmURL = llm.URL()
	}
	progress("starting the local pod runner, the gateway and the operator")
	if err := s.podRunner(ctx); err != nil {
		return err
	}
	gatewayURL, err := s.gatewayAndOperator()
	if err != nil {
		return err
	}
	progress("applying namespace " + o.namespace + " with Agent " + agentName + " and waiting until it is Ready")
	if err := s.applyTenant(apiKey, llmURL); err != nil {
		return err
	}
	if err := s.waitServed(ctx, gatewayURL, apiKey); err != nil {
		return err
	}
	s.banner(out, gatewayURL, apiKey)
	<-ctx.Done()
	progress("stopping")
	return nil
}

func (s *stack) controlPlane() error {
	env, err := controlplane.Start()
	if err != nil {
		return err
	}
	s.env = env
	s.stops = append(s.stops, func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: failed to stop the control plane:", err)
		}
		_ = os.Remove(s.o.kubeconfig)
	})
	if err := os.MkdirAll(filepath.Dir(s.o.kubeconfig), 0o755); err != nil {
		return fmt.Errorf("failed to create kubeconfig folder: %w", err)
	}
	// Write then rename, so a watcher never reads half a file.
	if err := os.WriteFile(s.o.kubeconfig+".tmp", env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	if err := os.Rename(s.o.kubeconfig+".tmp", s.o.kubeconfig); err != nil {
		return fmt.Errorf("failed to write kubeconfig: %w", err)
	}
	if s.kubectl, err = exec.LookPath("kubectl"); err != nil {
		assets, aerr := controlplane.AssetsDir()
		if aerr != nil {
			return aerr
		}
		s.kubectl = filepath.Join(assets, "kubectl")
	}
	return nil
}

// services starts PostgreSQL, Redis and S3, makes the database and runs
// the migrations; it returns a fresh gateway API key for the tenant.
func (s *stack) services(ctx context.Context) (string, error) {
	pgDSN, stopPG, err := services.Postgres()
	if err != nil {
		return "", fmt.Errorf("failed to start PostgreSQL: %w", err)
	}
	s.stops = append(s.stops, stopPG)
	redisURL, stopRedis, err := services.Redis()
	if err != nil {
		return "", fmt.Errorf("failed to start Redis: %w", err)
	}
	s.stops = append(s.stops, stopRedis)
	s3URL, stopS3, err := services.S3()
	if err != nil {
		return "", fmt.Errorf("failed to start the S3 server: %w", err)
	}
	s.stops = append(s.stops, stopS3)
	appDSN, ownerDSN, err := database(ctx, pgDSN)
	if err != nil {
		return "", err
	}
	// A configured shared server (PICOBOT_TEST_POSTGRES_URL) keeps no
	// database of ours once we stop; a throwaway one goes as a whole.
	s.stops = append(s.stops, func() { dropDatabase(pgDSN, ownerDSN) })
	s3u, err := url.Parse(s3URL)
	if err != nil {
		return "", err
	}
	s3Key, s3Secret := "local", "local-secret"
	if s3u.User != nil {
		s3Key = s3u.User.Username()
		s3Secret, _ = s3u.User.Password()
		s3u.User = nil
	}
	s.conn = []string{
		"PICOBOT_POSTGRES_URL=" + appDSN, "PICOBOT_REDIS_URL=" + redisURL,
		"PICOBOT_S3_ENDPOINT=" + s3u.String(), "PICOBOT_S3_BUCKET=picobot-local", "PICOBOT_S3_REGION=us-east-1", "PICOBOT_S3_PATH_STYLE=true",
		"AWS_ACCESS_KEY_ID=" + s3Key, "AWS_SECRET_ACCESS_KEY=" + s3Secret,
		"KUBECONFIG=" + s.env.KubeconfigPath,
	}
	mig := exec.CommandContext(ctx, s.o.picobot, "migrate", "--app-role="+appRole)
	mig.Env = append(append(os.Environ(), s.conn...), "PICOBOT_POSTGRES_OWNER_URL="+ownerDSN)
	if out, err := mig.CombinedOutput(); err != nil {
		return "", fmt.Errorf("failed to run picobot migrate: %w\n%s", err, out)
	}
	credKey, err := randomHex(24)
	if err != nil {
		return "", err
	}
	// The operator's alone: the owner, and the key it derives each
	// tenant's database and Redis passwords from.
	s.conn = append(s.conn, "PICOBOT_POSTGRES_OWNER_URL="+ownerDSN, "PICOBOT_TENANT_CREDENTIALS_KEY="+credKey)
	return randomHex(16)
}

const appRole = "picobot_local"

// database creates a fresh database and the application role, returning
// the role's DSN and the owner's.
func database(ctx context.Context, adminDSN string) (app, owner string, err error) {
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return "", "", fmt.Errorf("failed to connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	name := fmt.Sprintf("picobot_local_%d", os.Getpid())
	if _, err := conn.Exec(ctx, `DO $$ BEGIN CREATE ROLE `+appRole+` LOGIN PASSWORD 'local'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`); err != nil {
		return "", "", fmt.Errorf("failed to create role %q: %w", appRole, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", "", fmt.Errorf("failed to create database %q: %w", name, err)
	}
	u, err := url.Parse(adminDSN)
	if err != nil {
		return "", "", err
	}
	u.Path = "/" + name
	owner = u.String()
	u.User = url.UserPassword(appRole, "local")
	return u.String(), owner, nil
}

// dropDatabase drops the database of ownerDSN through the admin
// connection, ending its sessions (the processes using it are stopped).
func dropDatabase(adminDSN, ownerDSN string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u, err := url.Parse(ownerDSN)
	if err != nil {
		return
	}
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return // a stopped throwaway server took it with it
	}
	defer func() { _ = conn.Close(ctx) }()
	name := strings.TrimPrefix(u.Path, "/")
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: failed to drop database %q: %v\n", name, err)
	}
}

// podRunner runs the cluster's pods as local processes until ctx ends.
func (s *stack) podRunner(ctx context.Context) error {
	logf, err := os.Create(filepath.Join(s.o.state, "podrunner.log"))
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		return fmt.Errorf("failed to make a client of the API server: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := podrunner.New(podrunner.Config{Client: cs, Images: map[string]string{runtimeImage: s.o.picobot, browserImage: s.o.picobot},
		WorkDir: filepath.Join(s.o.state, "pods"), Env: []string{"KUBECONFIG=" + s.env.KubeconfigPath}, Log: slog.New(slog.NewTextHandler(logf, nil))})
	done := make(chan struct{})
	go func() {
		if err := r.Run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: the pod runner failed:", err)
		}
		close(done)
	}()
	s.stops = append(s.stops, func() { cancel(); <-done; _ = logf.Close() })
	return nil
}

var (
	servingRE    = regexp.MustCompile(`PicoBot gateway is serving (http://\S+)/`)
	blobGrantsRE = regexp.MustCompile(`PicoBot gateway serves blob grants on (http://\S+)/`)
)

// gatewayAndOperator starts the gateway, then the operator (which gives
// session pods the gateway's blob grant address); it returns the
// gateway's URL.
func (s *stack) gatewayAndOperator() (string, error) {
	if err := s.kubectlRun(nil, "create", "namespace", systemNamespace); err != nil {
		return "", err
	}
	urlc, blobc := make(chan string, 1), make(chan string, 1)
	exited, err := s.spawn("gateway", func(line string) {
		if m := servingRE.FindStringSubmatch(line); m != nil {
			urlc <- m[1]
		}
		if m := blobGrantsRE.FindStringSubmatch(line); m != nil {
			blobc <- m[1]
		}
	}, s.o.picobot, "gateway", "--addr="+s.o.addr, "--blob-addr=127.0.0.1:0", "--namespace="+systemNamespace)
	if err != nil {
		return "", err
	}
	var gatewayURL, blobURL string
	for gatewayURL == "" || blobURL == "" {
		select {
		case gatewayURL = <-urlc:
		case blobURL = <-blobc:
		case <-exited:
			return "", fmt.Errorf("the gateway exited; its log is %s", filepath.Join(s.o.state, "gateway.log"))
		case <-time.After(2 * time.Minute):
			return "", fmt.Errorf("the gateway did not start; its log is %s", filepath.Join(s.o.state, "gateway.log"))
		}
	}
	pid := os.Getpid()
	_, err = s.spawn("operator", nil, s.o.operator, "--kubeconfig="+s.env.KubeconfigPath, "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:0", "--runtime-image="+runtimeImage, "--browser-image="+browserImage,
		"--blob-url="+blobURL, "--gateway-namespace="+systemNamespace,
		fmt.Sprintf("--tenant-role-prefix=pblocal_%d_", pid), fmt.Sprintf("--tenant-user-prefix=pblocal-%d-", pid))
	return gatewayURL, err
}

// spawn starts a process with the connection environment, logging to
// <state>/<name>.log; onLine sees each line of its stderr. The returned
// channel is closed when it exits.
func (s *stack) spawn(name string, onLine func(string), bin string, args ...string) (<-chan struct{}, error) {
	logf, err := os.Create(filepath.Join(s.o.state, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), s.conn...)
	if name != "operator" {
		// The owner and the derivation key are the operator's alone.
		cmd.Env = withoutEnv(cmd.Env, "PICOBOT_POSTGRES_OWNER_URL", "PICOBOT_TENANT_CREDENTIALS_KEY")
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = logf, pw
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			_, _ = logf.WriteString(sc.Text() + "\n")
			if onLine != nil {
				onLine(sc.Text())
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	})
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = pw.Close(); close(done) }()
	s.stops = append(s.stops, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		wg.Wait()
		_ = logf.Close()
	})
	return done, nil
}

func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// applyTenant applies the namespace, the model key, the gateway API key and
// the example Agent (and the samples), then waits until the Agent is Ready.
// The Agent's manifest, without Secrets, is kept in the state folder to
// look at.
func (s *stack) applyTenant(apiKey, llmURL string) error {
	m := s.o.model
	if m.key == "" {
		m = model{provider: "openai", name: "demo", baseURL: llmURL, key: "demo"}
	}
	ns := s.o.namespace
	base := ""
	if m.baseURL != "" {
		base = "\n    baseURL: " + m.baseURL
	}
	agent := fmt.Sprintf(`# Applied by hack/localcluster (make run-operator); change it with
# kubectl --kubeconfig %[5]s -n %[1]s edit agent %[2]s
apiVersion: agents.picobot.io/v1alpha1
kind: Agent
metadata:
  name: %[2]s
  namespace: %[1]s
spec:
  instructions: You are PicoBot, a concise and helpful assistant. Use tools when they help.
  model:
    provider: %[3]s
    model: %[4]s%[6]s
    apiKeySecretRef: {name: chat-model-key, key: apiKey}
  tools:
    profile: coding
    allow: ["group:web", "calculator", "todo", "llm_task"]
  runtime:
    idleTimeout: 15m
    warmPool: 1
`, ns, agentName, m.provider, m.name, s.o.kubeconfig, base)
	if err := os.WriteFile(filepath.Join(s.o.state, "agent.yaml"), []byte(agent), 0o600); err != nil {
		return err
	}
	secrets := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: v1
kind: Secret
metadata:
  name: chat-model-key
  namespace: %[1]s
stringData:
  apiKey: %[2]s
---
apiVersion: v1
kind: Secret
metadata:
  name: gateway-api-key
  namespace: %[1]s
  labels:
    gateway.picobot.io/api-key: "true"
stringData:
  key: %[3]s
---
apiVersion: v1
kind: Secret
metadata:
  name: model-api-keys
  namespace: %[1]s
stringData:
  openai: %[4]s
  anthropic: %[5]s
---
`, ns, jsonString(m.key), apiKey, jsonString(envOr("OPENAI_API_KEY", "placeholder-set-OPENAI_API_KEY")),
		jsonString(envOr("ANTHROPIC_API_KEY", "placeholder-set-ANTHROPIC_API_KEY")))
	if err := s.kubectlRun(strings.NewReader(secrets+agent), "apply", "-f", "-"); err != nil {
		return err
	}
	if s.o.samples != "" {
		if err := s.kubectlRun(nil, "apply", "-n", ns, "-f", s.o.samples); err != nil {
			return err
		}
	}
	return s.kubectlRun(nil, "wait", "-n", ns, "--for=condition=Ready", "agent/"+agentName, "--timeout=3m")
}

// jsonString quotes a value for YAML (JSON strings are YAML strings).
func jsonString(v string) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// waitServed waits until the gateway knows the tenant's API key (the
// operator publishes its hash) and lists the Agent as ready.
func (s *stack) waitServed(ctx context.Context, gatewayURL, apiKey string) error {
	var last string
	for range 600 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, gatewayURL+"/api/v1/agents", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var body struct {
				Agents []struct {
					Name  string `json:"name"`
					Ready bool   `json:"ready"`
				} `json:"agents"`
			}
			derr := json.NewDecoder(resp.Body).Decode(&body)
			_ = resp.Body.Close()
			last = resp.Status
			for _, a := range body.Agents {
				if derr == nil && resp.StatusCode == http.StatusOK && a.Name == agentName && a.Ready {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the gateway does not serve Agent %s with the tenant's key (last answer: %s)", agentName, last)
}

func (s *stack) kubectlRun(stdin io.Reader, args ...string) error {
	cmd := exec.Command(s.kubectl, append([]string{"--kubeconfig", s.o.kubeconfig}, args...)...)
	cmd.Stdin = stdin
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// banner says where the chat is and what to try.
func (s *stack) banner(out io.Writer, gatewayURL, apiKey string) {
	modelText := "the demo model (no OPENAI_API_KEY or ANTHROPIC_API_KEY set; it shows the tools at work)"
	try := `"what is 6*7?"`
	if s.o.model.key != "" {
		modelText = s.o.model.provider + "/" + s.o.model.name
		try = `"hello"`
	}
	client := fmt.Sprintf("PICOBOT_URL=%s PICOBOT_API_KEY=%s %s", gatewayURL, apiKey, shownPath(s.o.picobot))
	kc := "kubectl --kubeconfig " + s.o.kubeconfig
	_, _ = fmt.Fprintf(out, `
  PicoBot cluster mode is running: Agent %[1]s in namespace %[2]s, model %[3]s.
  Web UI:      %[4]s/   (API key %[5]s)
  One message: %[6]s ask --agent %[1]s %[7]s
  Terminal:    %[6]s chat --agent %[1]s
  Resources:   %[8]s get picobot,pods -n %[2]s   (the Agent's manifest: %[9]s)
  Session pods run as local processes (test/podrunner); logs in %[10]s. Ctrl-C stops everything.

`, agentName, s.o.namespace, modelText, gatewayURL, apiKey, client, try, kc, filepath.Join(s.o.state, "agent.yaml"), s.o.state)
}

// shownPath is a path as the banner shows it: relative to the working
// folder when under it (bin/picobot), else absolute.
func shownPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", errors.New("failed to read random bytes: " + err.Error())
	}
	return hex.EncodeToString(b), nil
}
