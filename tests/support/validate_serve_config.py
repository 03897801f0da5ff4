"""Validate Ray Serve configs with Ray's own schema.

Reads a JSON list of cases from stdin, each {"name": ..., "config": {...}}
(a config object) or {"name": ..., "yaml": "..."} (a RayService's
serveConfigV2 string, parsed with PyYAML's YAML 1.1 rules as KubeRay's Go
parser reads it). Each config is checked with
ray.serve.schema.ServeDeploySchema.model_validate, the multi-application
schema Ray Serve applies to `applications: [...]`, and each application's
route_prefix with ray.serve._private.utils.validate_route_prefix, the check
Ray applies when it deploys the config (the schema itself leaves
route_prefix unchecked in 2.60). Prints one JSON line per
case: {"name", "ok", "error" (pydantic's text, or null), "parsed" (the
config as validated)}. Exits non-zero only when it cannot do its job (bad
input, Ray Serve not importable); a rejected config is a result, not a
failure. Run with the Python of tests/support/build-ray-serve.sh's venv.
"""

import json
import sys

import yaml
from ray.serve._private.utils import validate_route_prefix
from ray.serve.schema import ServeDeploySchema


def check(case):
    try:
        config = yaml.safe_load(case["yaml"]) if "yaml" in case else case["config"]
    except yaml.YAMLError as e:
        return {"ok": False, "error": f"YAML: {e}", "parsed": None}
    try:
        schema = ServeDeploySchema.model_validate(config)
        for app in schema.applications:
            validate_route_prefix(app.route_prefix)
    except Exception as e:  # pydantic.ValidationError, or a validator's own error
        return {"ok": False, "error": str(e), "parsed": config}
    return {"ok": True, "error": None, "parsed": config}


def main():
    cases = json.load(sys.stdin)
    if not isinstance(cases, list):
        sys.exit("expected a JSON list of cases")
    for case in cases:
        if not isinstance(case, dict) or "name" not in case or not ("config" in case or "yaml" in case):
            sys.exit(f"a case needs a name and a config or a yaml: {case!r}")
        # default=str: YAML 1.1 may read a scalar as a date, not JSON.
        print(json.dumps({"name": case["name"], **check(case)}, default=str), flush=True)


if __name__ == "__main__":
    main()
