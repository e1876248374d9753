"""Shell completion scripts printed by ``devbox completion bash|zsh``, generated from the
command line's own parser, so they always offer exactly its commands and options.

Box names, GPU profile names and image profile names are completed live through
``devbox list -q``, ``devbox gpu profiles -q`` and ``devbox image profiles -q``, so
completion always matches the server.
"""

from __future__ import annotations

import argparse

import shtab

SHELLS = ("bash", "zsh")

# shtab calls a bash helper with the word being completed and reads candidates from its
# output; in zsh the helper is an _arguments action.
_PREAMBLE = {
    "bash": """
_devbox_boxes() { compgen -W "$(devbox list -q 2>/dev/null)" -- "$1"; }
_devbox_profiles() { compgen -W "$(devbox gpu profiles -q 2>/dev/null)" -- "$1"; }
_devbox_images() { compgen -W "$(devbox image profiles -q 2>/dev/null)" -- "$1"; }
""",
    "zsh": """
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
_devbox_images() {
  local -a images
  images=(${(f)"$(devbox image profiles -q 2>/dev/null)"})
  _describe -t images 'image profile' images
}
""",
}
# shtab's zsh script registers itself when eval'd and runs when autoloaded from $fpath;
# ``source <(devbox completion zsh)`` is a file being read, which registers too.
_ZSH_REGISTER = "if [[ $zsh_eval_context[-1] == eval ]]; then"
_ZSH_REGISTER_ON_SOURCE = "if [[ $zsh_eval_context[-1] == (eval|file) ]]; then"
BOXES = dict.fromkeys(SHELLS, "_devbox_boxes")
PROFILES = dict.fromkeys(SHELLS, "_devbox_profiles")
IMAGES = dict.fromkeys(SHELLS, "_devbox_images")


def complete_with(action: argparse.Action, helper: dict[str, str]) -> None:
    """Complete the values of ``action`` with ``helper`` (:data:`BOXES`, :data:`PROFILES`,
    :data:`IMAGES`)."""
    action.complete = helper  # type: ignore[attr-defined]


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (``bash`` or ``zsh``)."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for shell {shell!r}; choose one of {SHELLS}")
    script: str = shtab.complete(parser, shell, preamble=_PREAMBLE[shell])
    if shell == "zsh":
        if _ZSH_REGISTER not in script:
            raise RuntimeError("shtab's zsh script no longer registers itself as expected")
        script = script.replace(_ZSH_REGISTER, _ZSH_REGISTER_ON_SOURCE)
    return script
