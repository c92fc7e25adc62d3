package approval

import (
	"regexp"
	"strings"
)

// dangerousPattern is one well-known destructive command.
type dangerousPattern struct {
	what string
	re   *regexp.Regexp
}

// rootish is a path whose recursive removal destroys the system or the
// user's files: /, /*, ~, $HOME, and the top-level system folders.
const rootish = `(?:/\*?|~/?\*?|\$\{?HOME\}?/?\*?|/(?:bin|boot|dev|etc|home|lib|lib64|opt|proc|root|sbin|srv|sys|usr|var)/?\*?)`

// blockDevice names a disk or partition device.
const blockDevice = `/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|loop\d|dm-\d|md\d|mapper/|root\b)`

// cmdStart is where a command word begins: the start of the line, after an
// operator, a quote (bash -c "…"), a wrapper (sudo, exec, env, xargs) or a
// folder (/sbin/mkfs). An argument such as `echo mkfs` is not a command.
const cmdStart = `(?:^|[;&|(\x60"']\s*|\b(?:sudo|exec|env|xargs|nohup|time)\s+|/)`

// dangerous are the commands refused before running in every mode. They
// match anywhere in the command line (after a ;, inside $(...)), since the
// line is run by a shell as a whole.
var dangerous = []dangerousPattern{
	{"a recursive removal of the root, home or a system folder (rm -rf /)",
		regexp.MustCompile(cmdStart + `rm\s+(?:-[a-zA-Z]*\s+|--[a-z-]+\s+)*-[a-zA-Z]*[rR][a-zA-Z]*\s+(?:-[a-zA-Z-]+\s+)*(?:--\s+)?["']?` + rootish + `["']?(?:\s|$|[;&|)])`)},
	{"a recursive removal of the root, home or a system folder (rm -rf /)",
		regexp.MustCompile(cmdStart + `rm\s+(?:-[a-zA-Z-]+\s+)*--no-preserve-root`)},
	{"a fork bomb", regexp.MustCompile(`([\w.:]+)\s*\(\)\s*\{[^}]*\|\s*&?\s*[\w.:]+\s*&[^}]*\}`)},
	{"a fork bomb", regexp.MustCompile(`:\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}`)},
	{"a write to a block device (> /dev/sda)", regexp.MustCompile(`>\|?\s*["']?` + blockDevice)},
	{"a write to a block device (dd of=/dev/sda)", regexp.MustCompile(`\bof=["']?` + blockDevice)},
	{"a write to a block device (tee /dev/sda)", regexp.MustCompile(`\btee\s+(?:-[a-z]+\s+)*["']?` + blockDevice)},
	{"making a file system (mkfs)", regexp.MustCompile(cmdStart + `mkfs(?:\.\w+)?\b`)},
	{"making a file system (mke2fs, mkswap)", regexp.MustCompile(cmdStart + `(?:mke2fs|mkswap|wipefs)\b`)},
	{"overwriting a disk (shred /dev/…)", regexp.MustCompile(`\bshred\b[^;&|]*` + blockDevice)},
	{"re-partitioning a disk (fdisk, parted, sfdisk)", regexp.MustCompile(cmdStart + `(?:fdisk|sfdisk|parted|sgdisk)\s+[^;&|]*` + blockDevice)},
	{"a recursive permission change of the root (chmod -R / )",
		regexp.MustCompile(`\bch(?:mod|own|grp)\s+(?:-[a-zA-Z]+\s+)*-[a-zA-Z]*R[a-zA-Z]*\s+\S+\s+["']?/["']?(?:\s|$|[;&|])`)},
}

// Dangerous says which well-known destructive command the line contains
// ("" when none). It is a guard against accidents and obvious attacks, not
// a boundary: a determined program gets around any list of patterns.
func Dangerous(command string) string {
	c := strings.Join(strings.Fields(command), " ")
	for _, d := range dangerous {
		if d.re.MatchString(c) {
			return d.what
		}
	}
	return ""
}
