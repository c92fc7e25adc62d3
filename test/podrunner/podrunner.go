// Package podrunner is a small kubelet stand-in for the local control plane
// (kube-apiserver + etcd, no scheduler, no kubelet, no containers): it
// registers a fake Node, binds unscheduled pods to it, and runs each pod's
// first container as a local process of our own binaries — images map to
// binaries, emptyDir volumes to temporary folders, env resolved like the
// kubelet does (values, field references, Secret keys, envFrom Secrets) — and
// reports Running, Succeeded or Failed in the pod's status. Deleting a pod
// stops its process. This makes a real end-to-end test of the operator's
// session pods possible on a machine without containers.
//
// What it does not do: isolation of any kind (processes share the host and
// network), resource limits, probes, restarts, init containers or service
// account tokens (processes get the runner's KUBECONFIG instead).
package podrunner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

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

type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	grace   time.Duration // the pod's terminationGracePeriodSeconds
	stopped bool
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
	c := p.Spec.Containers[0]
	bin, ok := r.cfg.Images[c.Image]
	if !ok {
		r.waiting(ctx, p, "ErrImagePull", fmt.Sprintf("image %q is not known to the local pod runner", c.Image))
		return
	}
	dir := filepath.Join(r.cfg.WorkDir, p.Namespace+"_"+p.Name)
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		d := filepath.Join(dir, "volumes", m.Name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			r.failed(ctx, p, 1, err.Error())
			return
		}
		mounts[m.MountPath] = d
	}
	env, err := r.env(ctx, p, c, mounts)
	if err != nil {
		r.waiting(ctx, p, "CreateContainerConfigError", err.Error())
		return
	}
	ip := r.podIP()
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
	cmd.Env = append(append(os.Environ(), r.cfg.Env...), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.Create(filepath.Join(r.cfg.WorkDir, p.Namespace+"_"+p.Name+".log"))
	if err != nil {
		r.failed(ctx, p, 1, err.Error())
		return
	}
	tail := &lastLine{}
	cmd.Stdout = logf
	cmd.Stderr = io.MultiWriter(logf, tail)
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		r.failed(ctx, p, 127, err.Error())
		return
	}
	grace := 30 * time.Second // the API server's default
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	pr := &proc{cmd: cmd, done: make(chan struct{}), grace: grace}
	r.mu.Lock()
	r.run[p.UID] = pr
	r.mu.Unlock()
	r.running(ctx, p, ip)
	r.wg.Go(func() {
		err := cmd.Wait()
		_ = logf.Close()
		close(pr.done)
		r.mu.Lock()
		stopped := pr.stopped
		r.mu.Unlock()
		if stopped {
			return // deleted: the pod object is going away
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			if code < 0 {
				code = 137
			}
		}
		if code == 0 {
			r.terminated(context.WithoutCancel(ctx), p, corev1.PodSucceeded, 0, "Completed", "")
		} else {
			r.terminated(context.WithoutCancel(ctx), p, corev1.PodFailed, int32(code), "Error", tail.String())
		}
	})
}

// Kill ends a pod's process with SIGKILL, as a node crash or OOM would; the
// pod then reports Failed.
func (r *Runner) Kill(uid types.UID) bool {
	r.mu.Lock()
	pr := r.run[uid]
	r.mu.Unlock()
	if pr == nil {
		return false
	}
	_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
	<-pr.done
	return true
}

// PID returns the process id of a pod's process, 0 when it has none.
func (r *Runner) PID(uid types.UID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pr := r.run[uid]; pr != nil {
		return pr.cmd.Process.Pid
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
	_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(pr.grace):
		_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
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
		for mp, local := range mounts {
			if v == mp || strings.HasPrefix(v, mp+"/") {
				v = local + strings.TrimPrefix(v, mp)
			}
		}
		out = append(out, e.Name+"="+v)
	}
	return out, nil
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

func (r *Runner) waiting(ctx context.Context, p *corev1.Pod, reason, msg string) {
	r.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	})
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
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image, Ready: true,
			Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
}

func (r *Runner) terminated(ctx context.Context, p *corev1.Pod, phase corev1.PodPhase, code int32, reason, msg string) {
	now := metav1.Now()
	r.updateStatus(ctx, p, func(s *corev1.PodStatus) {
		s.Phase = phase
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, FinishedAt: now}}}}
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
