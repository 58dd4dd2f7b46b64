"""A cowsay-like printer standing in for the docker/whalesay image's `cowsay`."""

from __future__ import annotations

import sys
import textwrap

WHALE = r'''    \
     \
      \
                    ##        .
              ## ## ##       ==
           ## ## ## ##      ===
       /""""""""""""""""___/ ===
  ~~~ {~~ ~~~~ ~~~ ~~~~ ~~ ~ /  ===- ~~~
       \______ o          __/
        \    \        __/
          \____\______/'''


def bubble(text: str, width: int = 40) -> str:
    lines = textwrap.wrap(text, width) or [""]
    size = max(len(line) for line in lines)
    top = " " + "_" * (size + 2)
    bottom = " " + "-" * (size + 2)
    if len(lines) == 1:
        body = [f"< {lines[0]} >"]
    else:
        body = []
        for i, line in enumerate(lines):
            if i == 0:
                left, right = "/", "\\"
            elif i == len(lines) - 1:
                left, right = "\\", "/"
            else:
                left, right = "|", "|"
            body.append(f"{left} {line.ljust(size)} {right}")
    return "\n".join([top, *body, bottom])


def main(argv: list[str]) -> int:
    text = " ".join(argv) if argv else sys.stdin.read().strip()
    print(bubble(text))
    print(WHALE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
