"""`python -m bench <name> [args]` runs `bench.<name>.main(args)`; `all` runs every benchmark."""

import sys

from bench import (
    app,
    attribution,
    estimators,
    explorer,
    heads,
    ingest,
    live,
    model_credit,
    models,
    monitor,
    oracle,
    reliability,
    runs,
    scale,
    teacher,
)

BENCHES = {
    "ingest": ingest,
    "estimators": estimators,
    "models": models,
    "model_credit": model_credit,
    "teacher": teacher,
    "oracle": oracle,
    "heads": heads,
    "app": app,
    "reliability": reliability,
    "explorer": explorer,
    "runs": runs,
    "live": live,
    "scale": scale,
    "monitor": monitor,
    "attribution": attribution,
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}|all}} [args]")
        return 0
    names = BENCHES if argv[0] == "all" else (argv[0],)
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        module = BENCHES[name]
        print(f"== bench {name} ==")
        code = module.main(argv[1:]) if module.main.__code__.co_argcount else module.main()
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
