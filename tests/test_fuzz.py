"""Open-ended input: whatever a learner types, the engine answers with a result, never a crash."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NAMES = ["probs", "dlogprobs", "counts", "n", "Yb", "torch", "F", "dprobs", "1.0", "0", "-1"]
OPS = ["+", "-", "*", "/", "@", "**"]
CALLS = [".sum(0)", ".sum(1, keepdim=True)", ".T", ".exp()", ".log()", ".view(-1)", "[0]", ""]

expression = st.recursive(
    st.sampled_from(NAMES),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(OPS), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(inner, st.sampled_from(CALLS)).map(lambda t: f"{t[0]}{t[1]}"),
    ),
    max_leaves=6,
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(expression)
def test_any_expression_gets_a_result(engine, expr):
    result = engine.check("atomic/probs", f"dprobs = {expr}").to_dict()
    assert result["error"] is not None or result["checks"]
    if result["error"]:
        assert result["error"]["kind"] in {"syntax", "forbidden", "runtime", "memory", "timeout"}
        assert result["error"]["message"]
    else:
        assert result["checks"][0]["verdict"] in {
            "exact",
            "approximate",
            "wrong",
            "shape",
            "missing",
        }


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(alphabet=string.printable, max_size=60))
def test_any_text_gets_a_result(engine, text):
    result = engine.check("atomic/probs", text).to_dict()
    assert isinstance(result["passed"], bool)
    assert not result["passed"]
