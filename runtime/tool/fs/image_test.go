package fs_test

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/picobot/picobot/runtime/tool"
	"github.com/picobot/picobot/runtime/tool/fs"
)

// file_read of an image file returns a line describing it and the image as
// an artifact the agent loop shows the model, judged by the bytes, not the
// name; other binary files are still refused, and text named .png is text.
func TestFileReadImage(t *testing.T) {
	g := NewWithT(t)
	env := workspace(t)
	var buf bytes.Buffer
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	img.Set(3, 4, color.RGBA{R: 255, A: 255})
	g.Expect(jpeg.Encode(&buf, img, nil)).To(Succeed())
	pic := buf.String()
	writeFiles(t, env.Workspace, map[string]string{
		"photo.dat":  pic,
		"notes.png":  "just text\n",
		"blob.bin":   "\x00\x01\x02binary",
		"fake.png":   "\x89PNG\r\n\x1a\n" + string(make([]byte, 20)),
		"dir/a.webp": "RIFF\x24\x00\x00\x00WEBPVP8 " + string(make([]byte, 20)),
	})

	res := call(t, env, "file_read", map[string]any{"path": "photo.dat"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Image photo.dat: image/jpeg, " + itoa(len(pic)) + " bytes, 40x30 pixels. It is attached for you to look at."))
	g.Expect(res.Artifacts).To(Equal([]tool.Artifact{{Name: "photo.dat", MediaType: "image/jpeg", Data: []byte(pic)}}))
	g.Expect(res.Artifacts[0].PresentToUser).To(BeFalse(), "for the model, not attached to the reply")

	res = call(t, env, "file_read", map[string]any{"path": "dir/a.webp"})
	g.Expect(res.IsError).To(BeFalse(), res.Content)
	g.Expect(res.Content).To(Equal("Image dir/a.webp: image/webp, 36 bytes. It is attached for you to look at."), "no dimensions where the standard library cannot read them")
	g.Expect(res.Artifacts).To(HaveLen(1))

	g.Expect(call(t, env, "file_read", map[string]any{"path": "notes.png"}).Content).To(Equal("     1\tjust text"))
	res = call(t, env, "file_read", map[string]any{"path": "blob.bin"})
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("looks like a binary file"))
	g.Expect(res.Artifacts).To(BeEmpty())

	_, _, res, ok := fs.ReadImage(env, "fake.png", 10)
	g.Expect(ok).To(BeFalse())
	g.Expect(res.Content).To(Equal("error: fake.png is larger than 10 bytes (0.0 MB), the limit for images."))
	_, _, res, ok = fs.ReadImage(env, "notes.png", 1<<20)
	g.Expect(ok).To(BeFalse())
	g.Expect(res.Content).To(Equal("error: notes.png is not a PNG, JPEG, GIF or WebP image."))
	_, _, res, ok = fs.ReadImage(env, "../outside.png", 1<<20)
	g.Expect(ok).To(BeFalse())
	g.Expect(res.IsError).To(BeTrue())
	g.Expect(res.Content).To(ContainSubstring("outside"))
}

func itoa(n int) string { return strconv.Itoa(n) }
