// Package podrunner is a small kubelet stand-in for the local control plane
// (kube-apiserver + etcd, no scheduler, no kubelet, no containers): it
// registers a fake Node, binds unscheduled pods to it, and runs each pod's
// containers as local processes of our own binaries — images map to
// binaries, emptyDir volumes (and their subPaths) to folders the containers
// of a pod share, env resolved like the kubelet does (values, field
// references, Secret keys, envFrom Secrets) — and reports Running, Succeeded
// or Failed in the pod's status. Native sidecars (init containers with
// restartPolicy Always) start first and are stopped once the main
// containers ended, as the kubelet does. Deleting a pod stops its
// processes. This makes a real end-to-end test of the operator's session
// pods possible on a machine without containers.
//
// Users: the runner's user stands in for the pod's user (and its KUBECONFIG
// for the ServiceAccount token). Running as root, a container that asks for
// a user of its own other than the pod's (its securityContext's runAsUser)
// and has no token runs as that user, with runAsGroup and the pod's fsGroup
// as supplementary group, and with only PATH and its own env (not the
// runner's environment); the pod's volume folders then belong to the
// fsGroup, group-writable and setgid, and the folders leading to them and to
// its binary are made traversable (o+x). So the user boundary between a
// session pod's runtime and sandbox containers is real here. Not running as
// root, every container runs as the runner.
//
// What it does not emulate: namespaces of any kind — containers share the
// host's PID namespace (/proc lists every process; only the user boundary
// and the sandbox's Landlock keep one container out of another's
// /proc/<pid>), mount namespace (no read-only root, no private /tmp: a
// mount path is rewritten in env values only) and network (every pod
// listens on a loopback address of its own — `--listen=:PORT` arguments and
// env values ":PORT" naming a declared container port are rewritten to it —
// and reaches everything the host reaches: no NetworkPolicy); seccomp and capability settings;
// RuntimeClasses; resource limits, probes, restarts, ordinary init
// containers; ServiceAccount tokens (see above). A session pod's sandbox
// pod (sandbox placement "pod") is a pod like any other here: its own
// loopback address, its own folders, another user; its NetworkPolicy is
// not enforced, and its workspace is mounted at another local folder than
// the runtime's (the exec server maps the runtime's paths onto its own).
package podrunner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Config configures a Runner.
type Config struct {
	Client kubernetes.Interface
	// NodeName of the fake node; "local-runner" when empty.
	NodeName string
	// Images maps an image reference to the local binary that plays it; the
	// container's command[0] is replaced by it. An image not in the map makes
	// the pod wait with ErrImagePull, like a kubelet that cannot pull it.
	Images map[string]string
	// WorkDir holds the pods' volumes and logs.
	WorkDir string
	// Env is given to every process before the pod's own (KUBECONFIG, PATH).
	Env []string
	Log *slog.Logger
}

// Runner runs pods as local processes.
type Runner struct {
	cfg Config
	mu  sync.Mutex
	run map[types.UID]*proc
	ips int // pod addresses handed out
	wg  sync.WaitGroup
}

// proc is a running pod: its containers, sidecars first.
type proc struct {
	containers []*container
	// done is closed once the main containers ended and the sidecars were
	// stopped.
	done    chan struct{}
	grace   time.Duration // the pod's terminationGracePeriodSeconds
	stopped bool
}

// container is one container's process.
type container struct {
	name, image string
	sidecar     bool
	cmd         *exec.Cmd
	log         *os.File
	tail        *lastLine
	done        chan struct{}
	code        int // exit code, set before done is closed
}

// signal sends sig to every container's process group.
func (pr *proc) signal(sig syscall.Signal) {
	for _, c := range pr.containers {
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
	}
}

// wait waits for every container of pr.
func (pr *proc) wait() {
	for _, c := range pr.containers {
		<-c.done
	}
}

// New returns a runner.
func New(cfg Config) *Runner {
	if cfg.NodeName == "" {
		cfg.NodeName = "local-runner"
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Runner{cfg: cfg, run: map[types.UID]*proc{}}
}

// Run registers the node and runs pods until ctx ends; then it stops every
// process it started.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.registerNode(ctx); err != nil {
		return err
	}
	lw := cache.NewListWatchFromClient(r.cfg.Client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	queue := make(chan *corev1.Pod, 1024)
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			select {
			case queue <- p:
			case <-ctx.Done():
			}
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				r.stop(p.UID, false)
			}
		},
	})
	if err != nil {
		return err
	}
	go inf.Run(ctx.Done())
	go r.heartbeat(ctx)
	for {
		select {
		case <-ctx.Done():
			r.stopAll()
			return nil
		case p := <-queue:
			r.handle(ctx, p)
		}
	}
}

func (r *Runner) registerNode(ctx context.Context) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.NodeName, Labels: map[string]string{"kubernetes.io/hostname": r.cfg.NodeName}}}
	if _, err := r.cfg.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to register node: %w", err)
	}
	return r.nodeReady(ctx)
}

func (r *Runner) nodeReady(ctx context.Context) error {
	n, err := r.cfg.Client.CoreV1().Nodes().Get(ctx, r.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "LocalRunner",
		Message: "pods run as local processes", LastHeartbeatTime: now, LastTransitionTime: now}}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	n.Status.Allocatable = n.Status.Capacity
	_, err = r.cfg.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func (r *Runner) heartbeat(ctx context.Context) {
	t := time.NewTicker(20 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.nodeReady(ctx); err != nil && ctx.Err() == nil {
				r.cfg.Log.Error("Node heartbeat failed", "err", err)
			}
		}
	}
}

func (r *Runner) handle(ctx context.Context, p *corev1.Pod) {
	switch {
	case p.DeletionTimestamp != nil:
		if p.Spec.NodeName == r.cfg.NodeName {
			r.wg.Go(func() { r.finishDeletion(ctx, p) })
		}
	case p.Spec.NodeName == "":
		r.bind(ctx, p)
	case p.Spec.NodeName != r.cfg.NodeName:
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
	default:
		r.mu.Lock()
		_, running := r.run[p.UID]
		r.mu.Unlock()
		if !running && p.Status.Phase == corev1.PodPending {
			r.start(ctx, p)
		}
	}
}

// bind is the scheduler's part: every pod goes to our node.
func (r *Runner) bind(ctx context.Context, p *corev1.Pod) {
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: r.cfg.NodeName}}
	if err := r.cfg.Client.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.cfg.Log.Error("Failed to bind pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

func (r *Runner) start(ctx context.Context, p *corev1.Pod) {
	dir := filepath.Join(r.cfg.WorkDir, p.Namespace+"_"+p.Name)
	ip := r.podIP()
	grace := 30 * time.Second // the API server's default
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	pr := &proc{done: make(chan struct{}), grace: grace}
	// An emptyDir is the pod's own: a pod that takes the name of a deleted
	// one (a replaced sandbox pod) starts with empty ones, as under a
	// kubelet. Other volumes (a PVC) keep their folder.
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir != nil {
			_ = os.RemoveAll(filepath.Join(dir, "volumes", v.Name))
		}
	}
	renew, err := r.writeTokens(ctx, p, dir)
	if err != nil {
		r.waiting(ctx, p, podContainers(p)[0].Name, "CreateContainerConfigError", err.Error())
		return
	}
	for i, c := range podContainers(p) {
		ct, reason, err := r.prepare(ctx, p, c, dir, ip, i == len(sidecars(p)))
		if err == nil {
			err = ct.cmd.Start()
			reason = "StartError"
		}
		if err != nil {
			if ct != nil && ct.log != nil {
				_ = ct.log.Close()
			}
			pr.signal(syscall.SIGKILL)
			for _, started := range pr.containers {
				_ = started.cmd.Wait()
			}
			switch reason {
			case "ErrImagePull", "CreateContainerConfigError":
				r.waiting(ctx, p, c.Name, reason, err.Error())
			default:
				r.failed(ctx, p, 127, err.Error())
			}
			return
		}
		pr.containers = append(pr.containers, ct)
		go func() {
			err := ct.cmd.Wait()
			_ = ct.log.Close()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				ct.code = ee.ExitCode()
				if ct.code < 0 {
					ct.code = 137
				}
			}
			close(ct.done)
		}()
	}
	r.mu.Lock()
	r.run[p.UID] = pr
	r.mu.Unlock()
	r.running(ctx, p, ip)
	r.wg.Go(func() { r.watch(ctx, p, pr) })
	if renew > 0 {
		r.wg.Go(func() { r.renewTokens(ctx, p, dir, renew, pr.done) })
	}
}

// writeTokens writes the audience-bound ServiceAccount tokens of the pod's
// projected volumes (the ones a container shows another service, such as
// the blob grant service's), issued by the API server with the
// TokenRequest API and bound to the pod, as the kubelet does. Tokens
// without an audience stand for the API server's, which the runner's
// KUBECONFIG stands in for. It returns when they are to be renewed (80%
// of the shortest lifetime, as the kubelet), 0 when there are none.
func (r *Runner) writeTokens(ctx context.Context, p *corev1.Pod, dir string) (time.Duration, error) {
	var renew time.Duration
	for _, v := range p.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			t := src.ServiceAccountToken
			if t == nil || t.Audience == "" {
				continue
			}
			exp := int64(3600)
			if t.ExpirationSeconds != nil {
				exp = *t.ExpirationSeconds
			}
			sa := p.Spec.ServiceAccountName
			if sa == "" {
				sa = "default"
			}
			tr, err := r.cfg.Client.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{Audiences: []string{t.Audience}, ExpirationSeconds: &exp,
					BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}},
				metav1.CreateOptions{})
			if err != nil {
				return 0, fmt.Errorf("failed to get a token of ServiceAccount %q for volume %q: %w", sa, v.Name, err)
			}
			folder := filepath.Join(dir, "volumes", v.Name)
			if err := os.MkdirAll(folder, 0o700); err != nil {
				return 0, err
			}
			tmp := filepath.Join(folder, "."+t.Path+".tmp")
			if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
				return 0, err
			}
			if err := os.Rename(tmp, filepath.Join(folder, t.Path)); err != nil {
				return 0, err
			}
			if d := time.Duration(exp) * time.Second * 4 / 5; renew == 0 || d < renew {
				renew = d
			}
		}
	}
	return renew, nil
}

// renewTokens rewrites the pod's tokens every period until it ends.
func (r *Runner) renewTokens(ctx context.Context, p *corev1.Pod, dir string, period time.Duration, done <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
			if _, err := r.writeTokens(ctx, p, dir); err != nil && ctx.Err() == nil {
				r.cfg.Log.Error("Failed to renew a pod's tokens", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
		}
	}
}

// watch waits for the pod's main containers, then stops its sidecars as
// the kubelet does, and reports how the pod ended.
func (r *Runner) watch(ctx context.Context, p *corev1.Pod, pr *proc) {
	var main []*container
	for _, c := range pr.containers {
		if !c.sidecar {
			main = append(main, c)
			<-c.done
		}
	}
	for _, c := range pr.containers {
		if c.sidecar {
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	select {
	case <-allDone(pr):
	case <-time.After(pr.grace):
		pr.signal(syscall.SIGKILL)
	}
	pr.wait()
	close(pr.done)
	r.mu.Lock()
	stopped := pr.stopped
	r.mu.Unlock()
	if stopped {
		return // deleted: the pod object is going away
	}
	for _, c := range main {
		if c.code != 0 {
			r.terminated(context.WithoutCancel(ctx), p, corev1.PodFailed, int32(c.code), "Error", c.tail.String())
			return
		}
	}
	r.terminated(context.WithoutCancel(ctx), p, corev1.PodSucceeded, 0, "Completed", "")
}

func allDone(pr *proc) <-chan struct{} {
	ch := make(chan struct{})
	go func() { pr.wait(); close(ch) }()
	return ch
}

// sidecars are the pod's native sidecars: init containers that keep
// running (restartPolicy Always) beside the main containers.
func sidecars(p *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}

// podContainers are the containers the runner starts, in order: sidecars,
// then the main containers.
func podContainers(p *corev1.Pod) []corev1.Container {
	return append(sidecars(p), p.Spec.Containers...)
}

// prepare builds a container's process: its binary, volumes, environment,
// user and log. It returns the waiting reason with an error.
func (r *Runner) prepare(ctx context.Context, p *corev1.Pod, c corev1.Container, dir, ip string, first bool) (*container, string, error) {
	bin, ok := r.cfg.Images[c.Image]
	if !ok {
		return nil, "ErrImagePull", fmt.Errorf("image %q is not known to the local pod runner", c.Image)
	}
	user := r.userOf(p, c)
	mounts, err := r.volumes(p, c, dir, user != nil)
	if err != nil {
		return nil, "StartError", err
	}
	env, err := r.env(ctx, p, c, mounts)
	if err != nil {
		return nil, "CreateContainerConfigError", err
	}
	env = listenOn(env, c, ip)
	args := append([]string{}, c.Command[1:]...)
	for _, a := range c.Args {
		// A pod has a network namespace of its own, where it listens on
		// all addresses; here every pod shares the host's, so it listens on
		// its own loopback address instead, and two pods serving the same
		// port do not collide.
		if port, ok := strings.CutPrefix(a, "--listen=:"); ok {
			a = "--listen=" + ip + ":" + port
		}
		args = append(args, a)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if user != nil {
		// Another user, as the container's securityContext says: it gets
		// neither the runner's environment nor its KUBECONFIG (there is no
		// token to stand in for), and its binary must be reachable.
		cmd.Env = append([]string{"PATH=" + defaultPath}, env...)
		cmd.SysProcAttr.Credential = user
		if err := traversable(filepath.Dir(bin)); err != nil {
			return nil, "StartError", err
		}
	} else {
		cmd.Env = append(append(os.Environ(), r.cfg.Env...), env...)
	}
	name := p.Namespace + "_" + p.Name + ".log"
	if !first {
		name = p.Namespace + "_" + p.Name + "_" + c.Name + ".log"
	}
	logf, err := os.Create(filepath.Join(r.cfg.WorkDir, name))
	if err != nil {
		return nil, "StartError", err
	}
	tail := &lastLine{}
	cmd.Stdout = logf
	cmd.Stderr = io.MultiWriter(logf, tail)
	sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
	return &container{name: c.Name, image: c.Image, sidecar: sidecar, cmd: cmd, log: logf, tail: tail, done: make(chan struct{})}, "", nil
}

// defaultPath is the PATH of a container run as another user.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// userOf is the user a container runs as when it asks for a user of its
// own, other than the pod's (its securityContext's runAsUser), has no
// ServiceAccount token and the runner is root: that user, with runAsGroup
// and the pod's fsGroup. Every other container runs as the runner, whose
// user stands in for the pod's (and whose KUBECONFIG for the token); nil
// means that. So the runner reproduces the user boundary between the
// containers of one pod, which is what a sandbox container relies on.
func (r *Runner) userOf(p *corev1.Pod, c corev1.Container) *syscall.Credential {
	sc := c.SecurityContext
	if os.Geteuid() != 0 || hasToken(p, c) || sc == nil || sc.RunAsUser == nil {
		return nil
	}
	if psc := p.Spec.SecurityContext; psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == *sc.RunAsUser {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(*sc.RunAsUser)}
	if sc.RunAsGroup != nil {
		cred.Gid = uint32(*sc.RunAsGroup)
	} else if psc := p.Spec.SecurityContext; psc != nil && psc.RunAsGroup != nil {
		cred.Gid = uint32(*psc.RunAsGroup)
	}
	if g := fsGroup(p); g != nil {
		cred.Groups = []uint32{uint32(*g)}
	}
	return cred
}

// hasToken reports whether the kubelet would give the container a
// ServiceAccount token: automounted, or a projected token it mounts.
func hasToken(p *corev1.Pod, c corev1.Container) bool {
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		return true
	}
	for _, m := range c.VolumeMounts {
		for _, v := range p.Spec.Volumes {
			if v.Name != m.Name || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					return true
				}
			}
		}
	}
	return false
}

func fsGroup(p *corev1.Pod) *int64 {
	if sc := p.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// volumes makes a container's volume folders (a subPath inside its
// volume's) and maps mount paths to them. When a container runs as another
// user, the folders belong to the pod's fsGroup, group-writable and setgid
// as the kubelet leaves an emptyDir, and the way to them is traversable.
func (r *Runner) volumes(p *corev1.Pod, c corev1.Container, dir string, otherUser bool) (map[string]string, error) {
	mounts := map[string]string{}
	g := fsGroup(p)
	for _, m := range c.VolumeMounts {
		vol := filepath.Join(dir, "volumes", m.Name)
		d := filepath.Join(vol, m.SubPath)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if os.Geteuid() == 0 && g != nil {
			for _, f := range []string{vol, d} {
				if err := os.Chown(f, 0, int(*g)); err != nil {
					return nil, err
				}
				if err := os.Chmod(f, 0o770|os.ModeSetgid); err != nil {
					return nil, err
				}
			}
		}
		if otherUser {
			if err := traversable(filepath.Join(dir, "volumes")); err != nil {
				return nil, err
			}
		}
		mounts[m.MountPath] = d
	}
	return mounts, nil
}

// traversable lets every user pass through dir and its parents (o+x), as
// /var/lib/kubelet/pods is, so a container of another user reaches its
// volumes and binary. It lists nothing (no o+r).
func traversable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode()|0o001); err != nil {
				return fmt.Errorf("failed to make %q traversable: %w", d, err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// Kill ends a pod's processes with SIGKILL, as a node crash or OOM would;
// the pod then reports Failed.
func (r *Runner) Kill(uid types.UID) bool {
	r.mu.Lock()
	pr := r.run[uid]
	r.mu.Unlock()
	if pr == nil {
		return false
	}
	pr.signal(syscall.SIGKILL)
	<-pr.done
	return true
}

// PID returns the process id of a pod's first main container, 0 when it
// has none.
func (r *Runner) PID(uid types.UID) int {
	return r.ContainerPID(uid, "")
}

// ContainerPID returns the process id of the named container of a pod (the
// first main container for ""), 0 when it has none.
func (r *Runner) ContainerPID(uid types.UID, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pr := r.run[uid]; pr != nil {
		for _, c := range pr.containers {
			if c.name == name || name == "" && !c.sidecar {
				return c.cmd.Process.Pid
			}
		}
	}
	return 0
}

// Running returns the number of pod processes alive.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, pr := range r.run {
		select {
		case <-pr.done:
		default:
			n++
		}
	}
	return n
}

// stop ends a pod's process as a kubelet does: SIGTERM, then SIGKILL after
// the pod's termination grace period.
func (r *Runner) stop(uid types.UID, _ bool) {
	r.mu.Lock()
	pr := r.run[uid]
	if pr != nil {
		pr.stopped = true
	}
	delete(r.run, uid)
	r.mu.Unlock()
	if pr == nil {
		return
	}
	pr.signal(syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(pr.grace):
		pr.signal(syscall.SIGKILL)
		<-pr.done
	}
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	uids := make([]types.UID, 0, len(r.run))
	for uid := range r.run {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	for _, uid := range uids {
		r.stop(uid, false)
	}
	r.wg.Wait()
}

// finishDeletion stops the process of a pod being deleted and confirms the
// deletion, the kubelet's part of graceful deletion.
func (r *Runner) finishDeletion(ctx context.Context, p *corev1.Pod) {
	r.stop(p.UID, false)
	err := r.cfg.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0),
		Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.cfg.Log.Error("Failed to confirm pod deletion", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// env resolves a container's environment like the kubelet, with mount paths
// rewritten to the pod's local folders.
func (r *Runner) env(ctx context.Context, p *corev1.Pod, c corev1.Container, mounts map[string]string) ([]string, error) {
	var out []string
	secrets := map[string]*corev1.Secret{}
	secret := func(name string) (*corev1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		s, err := r.cfg.Client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("secret %q not found", name)
			}
			return nil, err
		}
		secrets[name] = s
		return s, nil
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			continue
		}
		s, err := secret(ef.SecretRef.Name)
		if err != nil {
			if ptr.Deref(ef.SecretRef.Optional, false) {
				continue
			}
			return nil, err
		}
		for k, v := range s.Data {
			out = append(out, ef.Prefix+k+"="+string(v))
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil:
				switch f.FieldRef.FieldPath {
				case "metadata.name":
					v = p.Name
				case "metadata.namespace":
					v = p.Namespace
				case "metadata.uid":
					v = string(p.UID)
				case "spec.nodeName":
					v = r.cfg.NodeName
				default:
					return nil, fmt.Errorf("field %q is not supported by the local pod runner", f.FieldRef.FieldPath)
				}
			case f.SecretKeyRef != nil:
				s, err := secret(f.SecretKeyRef.Name)
				if err != nil {
					if ptr.Deref(f.SecretKeyRef.Optional, false) {
						continue
					}
					return nil, err
				}
				b, ok := s.Data[f.SecretKeyRef.Key]
				if !ok {
					if ptr.Deref(f.SecretKeyRef.Optional, false) {
						continue
					}
					return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", f.SecretKeyRef.Key, p.Namespace, f.SecretKeyRef.Name)
				}
				v = string(b)
			}
		}
		out = append(out, e.Name+"="+localPath(v, mounts))
	}
	return out, nil
}

// localPath rewrites a value naming a path under a mount to the mount's
// local folder (the longest mount path that holds it wins).
func localPath(v string, mounts map[string]string) string {
	best := ""
	for mp := range mounts {
		if (v == mp || strings.HasPrefix(v, mp+"/")) && len(mp) > len(best) {
			best = mp
		}
	}
	if best == "" {
		return v
	}
	return mounts[best] + strings.TrimPrefix(v, best)
}

func (r *Runner) updateStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.PodStatus)) {
	for range 5 {
		cur, err := r.cfg.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return // gone
		}
		if cur.UID != p.UID {
			return
		}
		mutate(&cur.Status)
		if _, err = r.cfg.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil || !apierrors.IsConflict(err) {
			return
		}
	}
}

func (r *Runner) waiting(ctx context.Context, p *corev1.Pod, container, reason, msg string) {
	r.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		state := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}
		s.InitContainerStatuses, s.ContainerStatuses = statuses(p, func(c corev1.Container) (corev1.ContainerState, bool) {
			if c.Name == container {
				return state, false
			}
			return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}, false
		})
	})
}

// statuses are the status of every container the runner starts (sidecars
// as init containers), each state chosen by state.
func statuses(p *corev1.Pod, state func(corev1.Container) (corev1.ContainerState, bool)) (init, main []corev1.ContainerStatus) {
	status := func(c corev1.Container) corev1.ContainerStatus {
		st, ready := state(c)
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: st, Ready: ready}
		if st.Running != nil {
			cs.Started = ptr.To(true)
		}
		return cs
	}
	for _, c := range sidecars(p) {
		init = append(init, status(c))
	}
	for _, c := range p.Spec.Containers {
		main = append(main, status(c))
	}
	return init, main
}

// listenOn rewrites env values that name only a port the container
// declares (":9090", e.g. PICOBOT_METRICS_ADDR), as --listen=: arguments
// are: the pod listens on its own loopback address, so two pods serving
// the same port do not collide and a scraper finds each at its pod IP.
func listenOn(env []string, c corev1.Container, ip string) []string {
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[strconv.Itoa(int(p.ContainerPort))] = true
	}
	for i, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if port, ok := strings.CutPrefix(v, ":"); ok && ports[port] {
			env[i] = k + "=" + net.JoinHostPort(ip, port)
		}
	}
	return env
}

// podIP hands out the next pod address: 127.1.0.1, 127.1.0.2, ... (all of
// 127.0.0.0/8 is the loopback interface's).
func (r *Runner) podIP() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ips++
	n := r.ips % (1 << 15)
	return fmt.Sprintf("127.1.%d.%d", n>>7, (n&0x7f)+1)
}

func (r *Runner) running(ctx context.Context, p *corev1.Pod, ip string) {
	now := metav1.Now()
	r.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.StartTime = &now
		s.PodIP, s.HostIP = ip, "127.0.0.1"
		s.PodIPs = []corev1.PodIP{{IP: ip}}
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		s.InitContainerStatuses, s.ContainerStatuses = statuses(p, func(corev1.Container) (corev1.ContainerState, bool) {
			return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}, true
		})
	})
}

func (r *Runner) terminated(ctx context.Context, p *corev1.Pod, phase corev1.PodPhase, code int32, reason, msg string) {
	now := metav1.Now()
	r.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = phase
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		s.InitContainerStatuses, s.ContainerStatuses = statuses(p, func(c corev1.Container) (corev1.ContainerState, bool) {
			if c.Name != p.Spec.Containers[0].Name {
				return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", FinishedAt: now}}, false
			}
			return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, FinishedAt: now}}, false
		})
	})
}

func (r *Runner) failed(ctx context.Context, p *corev1.Pod, code int32, msg string) {
	r.terminated(ctx, p, corev1.PodFailed, code, "StartError", msg)
}

// lastLine keeps the last non-empty line written, for the termination message.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			l.line = t
		}
	}
	return len(b), nil
}

func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.line) > 1024 {
		return l.line[:1024]
	}
	return l.line
}
