"""Rewrite expected_failures.txt from a JUnit report of the node suite run with an empty list:
`KILN_ONNX_XFAIL=none pytest tests/core/onnx_backend -n 2 --junitxml=r.xml; python tests/core/onnx_backend/update_expected_failures.py r.xml`."""
from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).with_name("expected_failures.txt")
HEADER = """\
# ONNX backend node tests Kiln is known to fail, one `test_name  # cause: detail` a line (see test_node_suite.py).
# Strict: a listed test that passes fails the suite; delete its line. Regenerate with update_expected_failures.py.
"""


def reason(message: str) -> str:
    """The failure's cause, grouped as in issue 6: unsupported op, attribute, dtype, input kind, numerical, bug."""
    first = message.split("\n")[0]
    if m := re.search(r"unsupported ONNX ops: (.*?) \((\w+) node '[^']*': (.*)\)$", first):
        return f"attribute: {m[3]}"
    if m := re.search(r"unsupported ONNX ops: (.*)$", first):
        return f"unsupported op: {m[1]}"
    if m := re.search(r"element type (\w+) is not supported", first):
        return f"dtype: {m[1]}"
    if m := re.search(r"input has dtype (\w+)", first):
        return f"dtype: {m[1]} ({first.split(': ')[1].split(' node')[0]})"
    if "is not a tensor" in first:
        return "input kind: sequence/optional inputs"
    if m := re.search(r"(\w+) node '[^']*': (\w+) \(input \d\) must be a constant", first):
        return f"computed parameter: {m[1]} {m[2]} computed inside the graph"
    if first.startswith("AssertionError") or "Mismatched elements" in message:
        return "numerical: outputs differ beyond the test's tolerance"
    if "empty axis" in first:
        return "zero-size: reduction over an empty axis"
    if "ShapeInferenceError" in first:
        return "import: ONNX's strict shape inference rejects the test model itself (ORT runs it non-strict)"
    return f"bug: {first[:120]}"


def main(report: str) -> None:
    lines = []
    for case in ET.parse(report).getroot().iter("testcase"):
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failure is None:
            continue
        name = re.sub(r"_cpu$", "", case.get("name", ""))
        lines.append(f"{name}  # {reason(failure.get('message') or failure.text or '')}")
    OUT.write_text(HEADER + "".join(f"{line}\n" for line in sorted(lines)))
    print(f"{len(lines)} expected failures -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
