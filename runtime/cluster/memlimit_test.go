package cluster

import (
	"io/fs"
	"testing"

	. "github.com/onsi/gomega"
)

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gomemlimit string
		files      map[string]string
		want       int64
		ok         bool
	}{
		{name: "cgroup v2 limit", files: map[string]string{cgroupV2MemoryMax: "268435456\n"}, want: 241591910, ok: true},
		{name: "cgroup v2 without a limit", files: map[string]string{cgroupV2MemoryMax: "max\n"}},
		{name: "cgroup v1 limit", files: map[string]string{cgroupV1MemoryMax: "536870912\n"}, want: 483183820, ok: true},
		{name: "cgroup v1 without a limit", files: map[string]string{cgroupV1MemoryMax: "9223372036854771712\n"}},
		{name: "GOMEMLIMIT wins", gomemlimit: "100MiB", files: map[string]string{cgroupV2MemoryMax: "268435456\n"}},
		{name: "no cgroup files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			env := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlimit
				}
				return ""
			}
			read := func(p string) ([]byte, error) {
				if v, ok := tc.files[p]; ok {
					return []byte(v), nil
				}
				return nil, fs.ErrNotExist
			}
			got, ok := memoryLimit(env, read)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
