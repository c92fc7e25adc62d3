package helm

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// ociArchive is an OCI image layout read from a tar archive: its files by
// name.
type ociArchive map[string][]byte

func readOCIArchive(t *testing.T, path string) ociArchive {
	t.Helper()
	f, err := os.Open(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	out := ociArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
			out[strings.TrimPrefix(h.Name, "./")] = b
		}
	}
}

// blob decodes the JSON blob of digest.
func (a ociArchive) blob(g Gomega, digest string, v any) {
	b, ok := a["blobs/"+strings.Replace(digest, ":", "/", 1)]
	g.Expect(ok).To(BeTrue(), "blob %s missing", digest)
	g.Expect(json.Unmarshal(b, v)).To(Succeed())
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
}

// layerFile is a file of an image layer.
type layerFile struct {
	mode     int64
	uid, gid int
	data     []byte
}

// TestRealnodeImageMatchesDockerfile builds the picobot image the way the
// real node gets it (hack/realnode-images.sh: umoci, no Docker) and checks
// it against images/picobot/Dockerfile's final stage: the same binaries at
// the same paths, static; the same USER and ENTRYPOINT; and what the
// distroless base gives the binaries (CA certificates, time zones, the
// non-root user, a writable /tmp).
func TestRealnodeImageMatchesDockerfile(t *testing.T) {
	g := NewWithT(t)
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: umoci keeps the image's file owners only as root")
	}
	_, df := loadDockerfile(t, "picobot")
	cache := t.TempDir()
	cmd := exec.Command(filepath.Join(root, "hack", "realnode-images.sh"), "picobot", "filesettest")
	cmd.Env = append(os.Environ(), "PICOBOT_CACHE="+cache)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred())
	archive := readOCIArchive(t, strings.TrimSpace(string(out)))

	var index struct{ Manifests []ociDescriptor }
	g.Expect(json.Unmarshal(archive["index.json"], &index)).To(Succeed())
	g.Expect(index.Manifests).To(HaveLen(1))
	g.Expect(index.Manifests[0].Annotations).To(HaveKeyWithValue("io.containerd.image.name", "localhost/picobot:filesettest"))
	var manifest struct {
		Config ociDescriptor
		Layers []ociDescriptor
	}
	archive.blob(g, index.Manifests[0].Digest, &manifest)
	var config struct {
		Architecture string
		Config       struct {
			User       string
			Entrypoint []string
		}
	}
	archive.blob(g, manifest.Config.Digest, &config)
	g.Expect(config.Config.User).To(Equal(lastUser(df)))
	var entry []string
	for _, in := range df.final().instructions {
		if in.cmd == "ENTRYPOINT" {
			entry, err = in.execForm()
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	g.Expect(config.Config.Entrypoint).To(Equal(entry))

	files := map[string]layerFile{}
	g.Expect(manifest.Layers).To(HaveLen(1))
	zr, err := gzip.NewReader(strings.NewReader(string(archive["blobs/"+strings.Replace(manifest.Layers[0].Digest, ":", "/", 1)])))
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		g.Expect(err).NotTo(HaveOccurred())
		if strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/") == "." {
			continue
		}
		f := layerFile{mode: h.Mode, uid: h.Uid, gid: h.Gid}
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			f.data, err = io.ReadAll(tr)
			g.Expect(err).NotTo(HaveOccurred())
		}
		files["/"+strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = f
	}

	// The Dockerfile's binaries, where it puts them.
	for _, dst := range finalCopies(g, df, "build") {
		g.Expect(files).To(HaveKey(dst))
		g.Expect(files[dst].mode&0o111).NotTo(BeZero(), "%s is executable", dst)
	}
	// What distroless/static:nonroot provides and the binaries use.
	g.Expect(files).To(HaveKey("/etc/ssl/certs/ca-certificates.crt"))
	g.Expect(files).To(HaveKey("/usr/share/zoneinfo/Europe/Berlin"), "CronJob time zones")
	g.Expect(string(files["/etc/passwd"].data)).To(ContainSubstring("nonroot:x:65532:65532:"))
	g.Expect(files["/home/nonroot"].uid).To(Equal(65532))
	g.Expect(files["/tmp"].mode & 0o1777).To(Equal(int64(0o1777)))
	// Nothing else at the top: no shell, no package manager.
	var top []string
	for name := range files {
		if strings.Count(name, "/") == 1 && name != "/" {
			top = append(top, name)
		}
	}
	g.Expect(top).To(ConsistOf("/picobot", "/operator", "/etc", "/usr", "/home", "/tmp"))
}
