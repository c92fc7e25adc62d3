package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// commands are the subcommands completion offers, in usage's order.
var commands = []string{"serve", "browser", "health", "session", "sandbox-server", "gateway", "migrate",
	"dead-letters", "ask", "chat", "node", "nodes", "version", "completion", "help"}

// completionCmd is `picobot completion bash|zsh|fish`: a script that
// completes the commands, and each command's flags as its own -h lists them
// (asked at completion time, so the script never goes stale).
func completionCmd(args []string, stdout io.Writer) error {
	fs := newFlags("completion", `Usage: picobot completion bash|zsh|fish

Prints a shell completion script. Load it with:
  bash:  source <(picobot completion bash)        (or save it in /etc/bash_completion.d/picobot)
  zsh:   source <(picobot completion zsh)
  fish:  picobot completion fish | source
`)
	if err := parseFlags(fs, args, stdout, os.Stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("want one shell (bash, zsh or fish), got %d arguments", fs.NArg())
	}
	cmds := strings.Join(commands, " ")
	var script string
	switch fs.Arg(0) {
	case "bash":
		script = fmt.Sprintf(bashCompletion, cmds)
	case "zsh":
		script = "autoload -U +X bashcompinit && bashcompinit\n" + fmt.Sprintf(bashCompletion, cmds)
	case "fish":
		script = fmt.Sprintf(fishCompletion, cmds)
	default:
		fs.Usage()
		return fmt.Errorf("unknown shell %q: want bash, zsh or fish", fs.Arg(0))
	}
	_, err := io.WriteString(stdout, script)
	return err
}

// The flags come from `picobot <command> -h`, whose flag lines are
// "  -name type" (the flag package's PrintDefaults).
const bashCompletion = `# picobot completion (bash)
_picobot() {
	local cur=${COMP_WORDS[COMP_CWORD]}
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "%s" -- "$cur"))
		return
	fi
	case "$cur" in
	-*)
		local flags
		flags=$("${COMP_WORDS[0]}" "${COMP_WORDS[1]}" -h 2>/dev/null | sed -n 's/^  -\([A-Za-z0-9-]*\).*/--\1/p')
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
		;;
	*)
		COMPREPLY=($(compgen -f -- "$cur"))
		;;
	esac
}
complete -F _picobot picobot
`

const fishCompletion = `# picobot completion (fish)
function __picobot_flags
	set -l cmd (commandline -opc)
	picobot $cmd[2] -h 2>/dev/null | sed -n 's/^  -\([A-Za-z0-9-]*\).*/--\1/p'
end
complete -c picobot -f -n __fish_use_subcommand -a "%s"
complete -c picobot -n 'not __fish_use_subcommand' -a '(__picobot_flags)'
`
