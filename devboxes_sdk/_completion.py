"""Shell completion scripts printed by ``devbox completion bash|zsh``.

Box names and GPU profile names are completed live through ``devbox list -q`` and
``devbox gpu profiles -q``, so completion always matches the server.
"""

from __future__ import annotations

_BASH = r"""# bash completion for devbox
# Load it now:        source <(devbox completion bash)
# Load it always:     devbox completion bash > ~/.local/share/bash-completion/completions/devbox

_devbox_words() {
    COMPREPLY=($(compgen -W "$1" -- "$2"))
}

_devbox() {
    local cur prev command="" subcommand="" i word
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"

    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        case "$word" in
            --url|--token|--preset|--ttl|--repo|--gpu-profile|--timeout|--hours) ((i++)) ;;
            -*) ;;
            *)
                if [[ -z "$command" ]]; then
                    command="$word"
                elif [[ -z "$subcommand" ]]; then
                    subcommand="$word"
                fi
                ;;
        esac
    done

    case "$prev" in
        --url|--token|--repo|--ttl|--timeout|--hours) return 0 ;;
        --preset) _devbox_words "small medium large" "$cur"; return 0 ;;
        --gpu-profile) _devbox_words "$(devbox gpu profiles -q 2>/dev/null)" "$cur"; return 0 ;;
    esac

    local global="--url --token --json --help"
    local commands="login whoami gpu create list status start stop extend delete ssh volumes"
    commands="$commands completion"
    local create_options="--preset --ttl --repo --gpu --gpu-profile --no-wait --ssh --timeout"
    if [[ -z "$command" ]]; then
        if [[ "$cur" == -* ]]; then
            _devbox_words "$global --version" "$cur"
        else
            _devbox_words "$commands" "$cur"
        fi
        return 0
    fi

    case "$command" in
        gpu)
            if [[ -z "$subcommand" ]]; then
                _devbox_words "profiles" "$cur"
            else
                _devbox_words "$global --quiet" "$cur"
            fi
            ;;
        create)
            if [[ "$cur" == -* ]]; then
                _devbox_words "$global $create_options" "$cur"
            fi
            ;;
        list) _devbox_words "$global --quiet" "$cur" ;;
        login|whoami) _devbox_words "$global" "$cur" ;;
        volumes)
            if [[ "$cur" == -* ]]; then
                _devbox_words "$global --yes" "$cur"
            elif [[ -z "$subcommand" ]]; then
                _devbox_words "purge" "$cur"
            fi
            ;;
        status|stop|start|extend|delete|ssh)
            if [[ "$command" == ssh && -n "$subcommand" ]]; then
                return 0
            fi
            if [[ "$cur" == -* ]]; then
                case "$command" in
                    start) _devbox_words "$global --no-wait --timeout" "$cur" ;;
                    delete) _devbox_words "$global --purge --yes" "$cur" ;;
                    extend) _devbox_words "$global --hours" "$cur" ;;
                    *) _devbox_words "$global" "$cur" ;;
                esac
            elif [[ -z "$subcommand" ]]; then
                _devbox_words "$(devbox list -q 2>/dev/null)" "$cur"
            fi
            ;;
        completion)
            [[ -z "$subcommand" ]] && _devbox_words "bash zsh" "$cur"
            ;;
    esac
    return 0
}

complete -F _devbox devbox
"""

_ZSH = r"""#compdef devbox
# zsh completion for devbox
# Load it now:        source <(devbox completion zsh)
# Load it always:     devbox completion zsh > "${fpath[1]}/_devbox"

_devbox_boxes() {
    local -a boxes
    boxes=(${(f)"$(devbox list -q 2>/dev/null)"})
    _describe -t boxes 'box' boxes
}

_devbox_profiles() {
    local -a profiles
    profiles=(${(f)"$(devbox gpu profiles -q 2>/dev/null)"})
    _describe -t profiles 'GPU profile' profiles
}

_devbox() {
    local curcontext="$curcontext" state line ret=1
    typeset -A opt_args
    local -a global
    global=(
        '--url[Devboxes API URL]:url:'
        '--token[API token]:token:'
        '--json[print the server JSON]'
    )

    _arguments -C $global \
        '(- *)--version[show the version]' \
        '1:command:->command' \
        '*::argument:->argument' && ret=0

    case $state in
        command)
            local -a commands
            commands=(
                'login:check a URL and token and save them'
                'whoami:show who the token belongs to'
                'gpu:GPU catalog'
                'create:create a box and wait until it is ready'
                'list:list your boxes'
                'status:show every detail of one box'
                'start:start a stopped box'
                'stop:stop a box, keeping its home volume'
                'extend:push a running box auto-stop time back'
                'volumes:list or purge retained home volumes'
                'delete:delete a box'
                'ssh:open an SSH session to a ready box'
                'completion:print a shell completion script'
            )
            _describe -t commands 'devbox command' commands && ret=0
            ;;
        argument)
            case $line[1] in
                login|whoami)
                    _arguments $global && ret=0 ;;
                gpu)
                    _arguments $global '1:subcommand:(profiles)' \
                        '(-q --quiet)'{-q,--quiet}'[print profile names only]' && ret=0 ;;
                create)
                    _arguments $global \
                        '--preset[box size]:preset:(small medium large)' \
                        '--ttl[auto-stop after HOURS]:hours:' \
                        '--repo[owner/repo or GitHub URL]:repository:' \
                        '(--gpu-profile)--gpu[attach the default GPU profile]' \
                        '(--gpu)--gpu-profile[attach this GPU profile]:profile:_devbox_profiles' \
                        '(--ssh)--no-wait[return at once]' \
                        '(--no-wait)--ssh[open an SSH session once ready]' \
                        '--timeout[seconds to wait]:seconds:' \
                        '1:name:' && ret=0 ;;
                list)
                    _arguments $global \
                        '(-q --quiet)'{-q,--quiet}'[print box names only]' && ret=0 ;;
                status|stop)
                    _arguments $global '1:box:_devbox_boxes' && ret=0 ;;
                extend)
                    _arguments $global '--hours[hours to add]:hours:' \
                        '1:box:_devbox_boxes' && ret=0 ;;
                volumes)
                    _arguments $global '1:subcommand:(purge)' \
                        '--yes[do not ask before purging]' '2:name:' && ret=0 ;;
                start)
                    _arguments $global '--no-wait[return at once]' \
                        '--timeout[seconds to wait]:seconds:' '1:box:_devbox_boxes' && ret=0 ;;
                delete)
                    _arguments $global '--purge[also delete the home volume]' \
                        '--yes[do not ask before purging]' '1:box:_devbox_boxes' && ret=0 ;;
                ssh)
                    _arguments $global '1:box:_devbox_boxes' '*::ssh argument:' && ret=0 ;;
                completion)
                    _arguments '1:shell:(bash zsh)' && ret=0 ;;
            esac
            ;;
    esac
    return ret
}

if [[ "${funcstack[1]}" == _devbox ]]; then
    _devbox "$@"
else
    compdef _devbox devbox
fi
"""

_SCRIPTS = {"bash": _BASH, "zsh": _ZSH}
SHELLS = tuple(_SCRIPTS)


def completion_script(shell: str) -> str:
    """The completion script for ``shell`` (``bash`` or ``zsh``)."""
    try:
        return _SCRIPTS[shell]
    except KeyError:
        raise ValueError(f"no completion for shell {shell!r}; choose one of {SHELLS}") from None
