package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the VersityGW release the tests run.
const Version = "v1.8.0"

const pkgPath = "github.com/versity/versitygw/cmd/versitygw"

// Server is a running VersityGW.
type Server struct {
	Endpoint  string // http://127.0.0.1:port
	Region    string
	AccessKey string
	SecretKey string
	DataDir   string // the posix backend's root: one directory per bucket
	// Sidecar is true when the data directory's filesystem had no user
	// xattrs and metadata went to a sidecar directory instead.
	Sidecar bool

	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has been reaped
	waitErr error
	once    sync.Once
}

// Options for Start.
type Options struct {
	// Dir holds the server's data, metadata and log; it must exist and be
	// the caller's (a t.TempDir()).
	Dir string
	// Ready bounds the wait for the server to answer (default 30s).
	Ready time.Duration
}

// Start builds the binary if needed and starts a server on a free port of
// 127.0.0.1, returning once it answers its health check.
func Start(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opts.Ready == 0 {
		opts.Ready = 30 * time.Second
	}
	// A free port can be taken between our probe and the server's bind;
	// one more try covers that race.
	for try := 0; ; try++ {
		s, err := start(bin, opts)
		if err == nil || try == 2 || !strings.Contains(err.Error(), "address already in use") {
			return s, err
		}
	}
}

func start(bin string, opts Options) (*Server, error) {
	data := filepath.Join(opts.Dir, "data")
	meta := filepath.Join(opts.Dir, "meta")
	for _, d := range []string{data, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("s3test: %w", err)
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", port),
		Region:    "us-east-1",
		AccessKey: "PRISM" + randString(15, upperAlnum),
		SecretKey: randString(40, upperAlnum+"abcdefghijklmnopqrstuvwxyz+/"),
		DataDir:   data,
		logPath:   filepath.Join(opts.Dir, fmt.Sprintf("versitygw-%d.log", port)),
		done:      make(chan struct{}),
	}
	xattrs, err := hasUserXattr(data)
	if err != nil {
		return nil, err
	}
	s.Sidecar = !xattrs
	args := []string{"--port", fmt.Sprintf("127.0.0.1:%d", port), "--region", s.Region,
		"--health", "/health", "--quiet", "--keep-alive", "posix"}
	if s.Sidecar {
		args = append(args, "--sidecar", meta)
	}
	args = append(args, data)
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, args...)
	// The root credentials go by environment, not by --access/--secret, so
	// the secret is not in the server's command line for ps to show.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.AccessKey, "ROOT_SECRET_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3test: starting %s: %w", bin, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(opts.Ready); err != nil {
		s.Kill()
		return nil, fmt.Errorf("s3test: versitygw at %s did not come up: %w; log tail:\n%s", s.Endpoint, err, s.LogTail(20))
	}
	return s, nil
}

func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	hc := &http.Client{Timeout: time.Second}
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("it exited (%v)", s.waitErr)
		default:
		}
		resp, err := hc.Get(s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("health check answered %s", resp.Status)
		}
		last = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no answer within %v (last: %v)", limit, last)
}

// StartT starts a server for a test and stops it when the test ends; a
// server that cannot start fails the test with its log tail.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("s3test: stopping versitygw: %v", err)
		}
	})
	return s
}

// SetEnv points the AWS credential chain of this test process at the
// server, and at nothing else: no shared config or credentials files, no
// profile, no instance metadata (which would be a request to a non-local
// address), no endpoint override.
func (s *Server) SetEnv(t testing.TB) {
	t.Helper()
	setEnv(t, s.AccessKey, s.SecretKey, s.Region)
}

// ServerEnv is SetEnv for tests that reach no server (closed ports,
// stalled listeners): throwaway credentials, and nothing else to find.
func ServerEnv(t testing.TB) {
	t.Helper()
	setEnv(t, "PRISMNOSERVER", randString(40, upperAlnum), "us-east-1")
}

func setEnv(t testing.TB, access, secret, region string) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           access,
		"AWS_SECRET_ACCESS_KEY":       secret,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_DEFAULT_PROFILE":         "",
		"AWS_REGION":                  region,
		"AWS_DEFAULT_REGION":          "",
		"AWS_CA_BUNDLE":               "",
		"AWS_CONFIG_FILE":             filepath.Join(dir, "no-config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-credentials"),
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_ENDPOINT_URL":            "",
		"AWS_ENDPOINT_URL_S3":         "",
	} {
		t.Setenv(k, v)
	}
}

// Env is the environment a child process (the boto3 peer of the benchmark)
// needs to reach the server.
func (s *Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretKey,
		"AWS_REGION=" + s.Region,
		"AWS_ENDPOINT_URL=" + s.Endpoint,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	}
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Kill ends the server at once (SIGKILL), as a crash would, and waits for
// it to be gone. Requests in flight see their connections reset.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	<-s.done
}

// Stop asks the server to exit (SIGTERM) and kills it if it has not within
// five seconds. Stopping a server that was killed is not an error.
func (s *Server) Stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	s.signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		s.Kill()
		return fmt.Errorf("versitygw (pid %d) ignored SIGTERM for 5s and was killed", s.PID())
	}
}

func (s *Server) signal(sig syscall.Signal) {
	select {
	case <-s.done:
		return // reaped: the PID may belong to someone else now
	default:
	}
	_ = s.cmd.Process.Signal(sig)
}

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// LogTail returns the last n lines of the server's output.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("s3test: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// hasUserXattr probes whether dir's filesystem stores user.* extended
// attributes, which the posix backend needs unless it has a sidecar.
func hasUserXattr(dir string) (bool, error) {
	p := filepath.Join(dir, ".prism-xattr-probe")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return false, fmt.Errorf("s3test: %w", err)
	}
	defer os.Remove(p)
	err := unix.Setxattr(p, "user.prism.probe", []byte("1"), 0)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EPERM):
		return false, nil
	}
	return false, fmt.Errorf("s3test: probing xattrs in %s: %w", dir, err)
}

const upperAlnum = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randString(n int, alphabet string) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux or macOS
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// Binary returns the path of a VersityGW binary: PRISM_VERSITYGW when set,
// else the cached build of Version, building it first if it is missing.
func Binary() (string, error) {
	if p := os.Getenv("PRISM_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("s3test: PRISM_VERSITYGW: %w", err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("s3test: no cache directory for the versitygw build: %w (set PRISM_VERSITYGW)", err)
	}
	dir := filepath.Join(cache, "prism", "versitygw-"+Version)
	bin := filepath.Join(dir, "versitygw")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // another process built it while we waited
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Built in a scratch GOBIN and renamed, so a half-written binary is
	// never taken for a finished one.
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	defer os.RemoveAll(tmp)
	gocmd, err := goTool()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, gocmd, "install", "-trimpath", pkgPath+"@"+Version)
	cmd.Dir = tmp // outside any module, so no go.mod or go.work applies
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("s3test: go install %s@%s failed after %v: %w\n%s", pkgPath, Version, time.Since(start).Round(time.Second), err, tail(out.String(), 20))
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
		return "", fmt.Errorf("s3test: %w", err)
	}
	return bin, nil
}

// goTool is the go command; go test and go run put $GOROOT/bin first on
// PATH, so it is found there whenever a test runs.
func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("s3test: building versitygw needs the go command on PATH (or set PRISM_VERSITYGW): %w", err)
	}
	return p, nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("s3test: locking %s: %w", path, err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
