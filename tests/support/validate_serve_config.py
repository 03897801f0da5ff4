"""Validate Ray Serve configs with Ray's own schema.

Reads a JSON list of {"name": ..., "config": {...}} from stdin, where each
config has the shape of a RayService's serveConfigV2 (applications: [...]),
and prints one JSON line per case: {"name", "ok", "error"}, the error being
Ray's (pydantic's) message. Exits 2 when the input cannot be read.
"""

import json
import sys

from ray.serve.schema import ServeDeploySchema


def main() -> int:
    try:
        cases = json.load(sys.stdin)
    except ValueError as e:
        print(f"cannot read the cases: {e}", file=sys.stderr)
        return 2
    for case in cases:
        try:
            ServeDeploySchema.model_validate(case["config"])
            result = {"name": case["name"], "ok": True, "error": None}
        except Exception as e:  # Ray's rules raise pydantic's ValidationError
            result = {"name": case["name"], "ok": False, "error": str(e)}
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
