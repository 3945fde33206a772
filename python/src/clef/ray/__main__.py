"""python -m clef.ray batch IN OUT --model DIR [options]   (docs/deploy.md)
python -m clef.ray serve --model DIR [options]            (a Ray Serve application: clef.ray.serve)"""
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb == "batch":
        from .batch import run

        return run(rest)
    if verb == "serve":
        from .serve import main as serve_main

        return serve_main(rest)
    print(f"python -m clef.ray: unknown verb {verb!r} (batch, serve)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
