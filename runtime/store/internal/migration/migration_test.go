package migration

import (
	"testing"
	"testing/fstest"

	. "github.com/onsi/gomega"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr string
	}{
		{
			name: "sorted by version",
			files: fstest.MapFS{
				"m/0002_b.up.sql":   {Data: []byte("B")},
				"m/0001_a.up.sql":   {Data: []byte("A")},
				"m/0010_c.up.sql":   {Data: []byte("C")},
				"m/README.md":       {Data: []byte("ignored")},
				"m/0003_x.down.sql": {Data: []byte("ignored")},
			},
			want: []int{1, 2, 10},
		},
		{name: "empty", files: fstest.MapFS{}, want: []int{}},
		{
			name:    "bad name",
			files:   fstest.MapFS{"m/init.up.sql": {Data: []byte("A")}},
			wantErr: "want NNNN_name.up.sql",
		},
		{
			name: "repeated version",
			files: fstest.MapFS{
				"m/0001_a.up.sql": {Data: []byte("A")},
				"m/1_b.up.sql":    {Data: []byte("B")},
			},
			wantErr: "share version 1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ms, err := Load(tt.files, "m")
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			versions := []int{}
			for _, m := range ms {
				versions = append(versions, m.Version)
				g.Expect(m.SQL).NotTo(BeEmpty())
			}
			g.Expect(versions).To(Equal(tt.want))
		})
	}
}
