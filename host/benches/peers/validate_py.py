"""The Python `jsonschema` contender of the validation benchmark (peers_validation.rs).

Usage: validate_py.py FIXTURE [--serve | --passes N]

FIXTURE is the JSON the benchmark writes: {"request_key", "schema", "answers": [{"text",
"valid"}]}. Each validation starts from an answer's JSON text, exactly as the other contenders
do: json.loads, the response-map shape checks of the guest (one key, only `action` and
`content`, `accept`, object content), then a Draft202012Validator with the format checker,
compiled once and reused; it stops at the first error.

On start it prints one JSON line: the versions, the formats the checker can assert, and its
verdict on every answer. Then, with --serve, it reads commands "SUBSET PASSES" (SUBSET is all,
valid or invalid) from stdin, one a line, and for each runs PASSES passes over that subset of the
answers, timed as a whole with time.perf_counter_ns, and prints one JSON line:
{"subset", "n", "ns", "valid"}. Without --serve it warms up and runs one such batch of the whole
mix (--passes, default 200), prints it and exits.
"""

import importlib.metadata
import json
import platform
import sys
import time

from jsonschema import Draft202012Validator


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    with open(args[0], encoding="utf-8") as f:
        fixture = json.load(f)
    key = fixture["request_key"]
    validator = Draft202012Validator(
        fixture["schema"], format_checker=Draft202012Validator.FORMAT_CHECKER
    )
    iter_errors = validator.iter_errors
    loads = json.loads

    def check(text: str) -> bool:
        try:
            responses = loads(text)
        except ValueError:
            return False
        if type(responses) is not dict or len(responses) != 1:
            return False
        response = responses.get(key)
        if type(response) is not dict:
            return False
        for field in response:
            if field != "action" and field != "content":
                return False
        if response.get("action") != "accept":
            return False
        content = response.get("content")
        if type(content) is not dict:
            return False
        error = next(iter_errors(content), None)
        return error is None

    texts = [a["text"] for a in fixture["answers"]]
    subsets = {
        "all": texts,
        "valid": [a["text"] for a in fixture["answers"] if a["valid"]],
        "invalid": [a["text"] for a in fixture["answers"] if not a["valid"]],
    }

    def run(subset: str, passes: int) -> dict:
        answers = subsets[subset]
        valid = 0
        started = time.perf_counter_ns()
        for _ in range(passes):
            for text in answers:
                if check(text):
                    valid += 1
        ns = time.perf_counter_ns() - started
        return {"subset": subset, "n": passes * len(answers), "ns": ns, "valid": valid}

    print(
        json.dumps(
            {
                "ready": True,
                "runtime": f"{platform.python_implementation()} {platform.python_version()}",
                "validator": f"jsonschema {importlib.metadata.version('jsonschema')}",
                "formats_checked": sorted(Draft202012Validator.FORMAT_CHECKER.checkers),
                "verdicts": [check(t) for t in texts],
            }
        ),
        flush=True,
    )
    if "--serve" in args:
        for line in sys.stdin:
            parts = line.split()
            if not parts:
                continue
            print(json.dumps(run(parts[0], int(parts[1]))), flush=True)
    else:
        passes = int(args[args.index("--passes") + 1]) if "--passes" in args else 200
        run("all", max(1, passes // 4))
        print(json.dumps(run("all", passes)), flush=True)


if __name__ == "__main__":
    main()
