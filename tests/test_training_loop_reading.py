"""Where a notebook trains, and with what (tutor/course/lecture.py): the loop's update is found
however it moves the parameters, and a lesson that trains its own network with the learner's
functions (the GPT's layers, the LSTM through time) takes those functions from the notebook,
whatever model the notebook's own loop trains. Read only: nothing here runs."""

from __future__ import annotations

from tutor.course import lecture
from tutor.pack.model import find_pack, load_pack
from tutor.training import training_code
from tutor.training.plan import TrainingSettings

GPT = load_pack(find_pack("gpt"))
MAKEMORE = load_pack(find_pack("makemore"))


def _functions(pack) -> dict[str, str]:
    s = TrainingSettings.from_pack(pack)
    return {sid: pack.step(sid).solution.strip() for sid in s.functions}


GPT_LOOP = """\
names = ['wte', 'wpe', 'lnfw', 'lnfb']
P = {k: p.detach().clone() for k, p in zip(names, parameters)}
M = {k: torch.zeros_like(p) for k, p in P.items()}
V = {k: torch.zeros_like(p) for k, p in P.items()}
for step in range(20):
    loss, cache = my_forward(P, Xb, Yb)
    grads = my_backward(P, Xb, cache)
    for k in names:
        adamw_update(P[k], grads[k], M[k], V[k], step + 1, 1e-3, 0.9, 0.999, 1e-8, 0.0)
"""

MY_BACKWARD = """\
def my_backward(P, Xb, c):
    dlogits = crossentropy_softmax_backward(c['logits'], c['targets'])
    dx, dw, db = matmul_backward(dlogits, c['x'], P['wte'].T)
    dx, dlnw, dlnb = layernorm_backward(dx, c['x'], P['lnfw'], c['m'], c['r'])
    dq = attention_backward(dx, c['qkv'], c['att'], 4)
    dg = gelu_backward(dq, c['fch'])
    dwte, dwpe = encoder_backward(dg, Xb, 27)
    return {'wte': dwte, 'wpe': dwpe, 'lnfw': dlnw, 'lnfb': dlnb}
"""


def test_a_lesson_with_its_own_network_trains_with_the_notebooks_functions():
    fns = _functions(GPT)
    cells = [*fns.values(), MY_BACKWARD, GPT_LOOP]
    answers = lecture.read_lecture(GPT, cells)
    assert answers.training is not None
    for sid, source in fns.items():
        assert answers.code[sid].strip().endswith(source.splitlines()[-1].strip())
    assert answers.training == training_code(GPT, {sid: answers.code[sid] for sid in fns})
    assert "your code" in answers.training


def test_a_function_the_training_needs_and_the_notebook_lacks_is_named():
    fns = _functions(GPT)
    cells = [s for sid, s in fns.items() if sid != "functions/attention_backward"]
    answers = lecture.read_lecture(GPT, [*cells, MY_BACKWARD, GPT_LOOP])
    assert answers.training is not None
    assert "does not define attention_backward" in answers.training
    assert any("attention_backward" in note for note in answers.notes)


def test_no_loop_that_trains_means_no_training_step():
    fns = _functions(GPT)
    # A loop that tries one function on a few cases trains nothing.
    tries = ("for scale in (1.0, 2.0):\n"
             "    out = layernorm_backward(scale * dout, inp, w, mean, rstd)\n"
             "    print(out[0].shape)\n")
    assert lecture.read_lecture(GPT, [*fns.values(), tries]).training is None
    assert lecture.read_lecture(GPT, list(fns.values())).training is None


SGD = "def sgd_step(p, g, lr):\n    p.data.sub_(lr * g)\n"


def _update(source: str):
    trees = lecture._trees([source])
    return lecture._update(trees, {"C", "W1", "b1", "W2", "b2"}, {})


def test_an_update_is_found_however_the_loop_moves_the_parameters():
    found = _update(SGD + "names = ['C', 'W1', 'b1', 'W2', 'b2']\n"
                    "for k in names:\n"
                    "    sgd_step(P[k], grads[k], lr)\n")
    assert found is not None and found.keyed == "P" and found.descends
    assert ast_text(found.source) == "grads" and found.params == ["C", "W1", "b1", "W2", "b2"]

    found = _update("params = [C, W1, b1, W2, b2]\n"
                    "for p, g in zip(params, mine):\n"
                    "    p.grad = g\n")
    assert found is not None and found.descends and ast_text(found.source) == "mine"

    found = _update("params = [C, W1, b1, W2, b2]\n"
                    "for p, g in zip(params, mine):\n"
                    "    p.grad = -g\n")
    assert found is not None and not found.descends  # handed to an optimizer, it climbs

    found = _update("for k in P:\n"
                    "    P[k] -= 0.1 * G[k]\n")
    assert found is not None and found.keyed == "P" and ast_text(found.source) == "G"


def test_an_in_place_step_with_an_optimizer_s_state_beside_it_is_an_update():
    # Nesterov's momentum zipped in as a third list, the step taken by `sub_`.
    found = _update("params = [C, W1, b1, W2, b2]\nbuf = [torch.zeros_like(p) for p in params]\n"
                    "for p, g, m in zip(params, mine, buf):\n"
                    "    m.mul_(0.9).add_(g)\n"
                    "    p.mul_(1 - 1e-5)\n"
                    "    p.sub_(lr * (g + 0.9 * m))\n")
    assert found is not None and found.descends and ast_text(found.source) == "mine"
    found = _update("params = [C, W1, b1, W2, b2]\n"
                    "for g, p in zip(mine, params):\n"
                    "    p.data.add_(g, alpha=-lr)\n")
    assert found is not None and found.descends and ast_text(found.source) == "mine"
    found = _update("params = [C, W1, b1, W2, b2]\n"
                    "for g, p in zip(mine, params):\n"
                    "    p.add_(lr * g)\n")
    assert found is not None and not found.descends


def test_a_loop_over_other_names_is_no_update():
    # Nor a call that does not change its first argument (a print, a comparison).
    assert _update("def sgd_step(p, g, lr):\n    print(p - lr * g)\n"
                   "for k in P:\n    sgd_step(P[k], grads[k], lr)\n") is None
    assert _update(SGD + "names = ['C', 'W1', 'other']\n"
                   "for k in names:\n"
                   "    sgd_step(P[k], grads[k], lr)\n") is None
    assert _update("for k in P:\n"
                   "    print(P[k], grads[k])\n") is None


def ast_text(node) -> str:
    import ast

    return ast.unparse(node)


def test_the_lessons_own_training_code_is_unchanged_for_makemore():
    # makemore trains the lesson's network itself: its loop body is the backward pass.
    assert not TrainingSettings.from_pack(MAKEMORE).assembled


def test_what_the_driver_computes_itself_is_what_the_notebooks_loop_must_get_right():
    # The LSTM's training computes the masked cross-entropy's gradient itself, as a notebook's
    # loop does in its own code: a wrong answer there means the loop trained on it. What the
    # learner's functions return is theirs to get right in the functions' own steps.
    lstm = load_pack(find_pack("lstm"))
    s = TrainingSettings.from_pack(lstm)
    names = {lstm.step(f).function.name for f in s.functions}
    needs = lecture._driver_own(lstm, s, names)
    assert "step/logits" in needs
    made_by_functions = {sid for sid in needs if lstm.step(sid).function is not None}
    assert not made_by_functions


def test_a_loop_that_only_collects_gradients_is_no_training():
    # lstm_backward's own loop through time, and a top-level loop that sums a step function's
    # gradients, take no step downhill: the notebook has no training loop.
    lstm = load_pack(find_pack("lstm"))
    fns = _functions(lstm)
    collect = ("dWx = torch.zeros_like(Wx)\n"
               "for s in reversed(range(T)):\n"
               "    dx, dh, dc, gWx, gWh, gb = lstm_step_backward(dh, dc, *cache[s])\n"
               "    dWx += gWx\n")
    assert lecture.read_lecture(lstm, [*fns.values(), collect]).training is None
    wrapped = "def check_bptt():\n" + "".join(f"    {ln}\n" for ln in collect.splitlines())
    assert lecture.read_lecture(lstm, [*fns.values(), wrapped]).training is None
    train = ("for it in range(100):\n"
             "    grads = lstm_backward(*run(it))\n"
             "    for p, g in zip(params, grads):\n"
             "        p.data -= 0.1 * g\n")
    assert lecture.read_lecture(lstm, [*fns.values(), collect, train]).training is not None


def test_a_running_gradient_keeps_what_its_name_held_before():
    # `g` is the lesson's generator until the backward code gives it a value of its own.
    from tutor.course.program import line_of

    source = ("noise = torch.randn(3, generator=g)\n"
              "g = torch.zeros_like(logprobs)\n"
              "g[range(n), Yb] = -1.0 / n\n"
              "dlogprobs = g\n"
              "g = g / probs\n"
              "dprobs = g\n")
    import ast

    lines = [line_of(node, source) for node in ast.parse(source).body]
    out = lecture._running_cells([lines], {"dlogprobs", "dprobs"}, {"logprobs", "probs"})
    text = "\n".join(line.source for line in out[0])
    assert text.splitlines()[0] == "noise = torch.randn(3, generator=g)"
    assert "dprobs = dlogprobs / probs" in text and "dlogprobs = g" not in text


MAKEMORE_LOOP = """\
# Exercise 4
parameters = [C, W1, b1, W2, b2, bngain, bnbias]
for i in range(200):
    ix = torch.randint(0, Xtr.shape[0], (32,), generator=g)
    Xb, Yb = Xtr[ix], Ytr[ix]
    emb = C[Xb]
    {backward}
    for p, grad in zip(parameters, {grads}):
        p.data += -0.1 * grad
"""


def _makemore_training(defs: str, backward: str, grads: str) -> str:
    loop = MAKEMORE_LOOP.format(backward=backward, grads=grads)
    training = lecture.read_lecture(MAKEMORE, [defs, loop]).training
    assert training is not None
    return training.split("# backward pass (yours, from the training loop)", 1)[1]


def test_the_loops_own_batch_is_the_tutors_and_the_learners_definitions_come_in_order():
    defs = ("class Base:\n    def cols(self, t):\n        return t.sum(0, keepdim=True)\n\n"
            "class Part(Base):\n    pass\n\n"
            "class Grads(Base):\n    def all(self, Xb, Yb):\n"
            "        return [local['w'](Part().cols(Xb))] * 7\n\n"
            "local = {'w': lambda x: x * 1.0}\n")
    backward = _makemore_training(defs, "pass", "Grads().all(Xb, Yb)")
    assert "Xtr[ix]" not in backward and "torch.randint" not in backward
    # A class after its base, and the dict of lambdas its method reads.
    assert backward.index("class Base") < backward.index("class Part") < backward.index(
        "class Grads") < backward.index("grads_applied")
    assert "local = {'w'" in backward


def test_a_method_called_for_what_it_fills_is_kept_with_the_object_it_fills():
    defs = ("class Model:\n    def __init__(self):\n        self.grads = {}\n"
            "    def backward(self, Xb):\n        self.grads = {'C': Xb * 1.0}\n"
            "        return 0.0\n"
            "    def grad_list(self):\n        return [self.grads['C']] * 7\n\n"
            "model = Model()\n")
    backward = _makemore_training(defs, "my_loss = model.backward(Xb)", "model.grad_list()")
    assert "model = Model()" in backward and "my_loss = model.backward(Xb)" in backward
    # A torch call is no method of the learner's object: the batch's draw stays out.
    assert "torch.randint" not in backward


def test_an_optimizers_state_leads_back_to_the_gradient_and_the_loops_own_batch_is_the_tutors():
    # Adam written out: the parameter moves by its first moment over the root of the second;
    # the gradient is what the first moment is built from. The batch, under names of the
    # learner's and drawn from their own data, is the tutor's.
    found = _update("for k in P:\n"
                    "    mom[k] = 0.9 * mom[k] + 0.1 * g[k]\n"
                    "    sq[k] = 0.999 * sq[k] + 0.001 * g[k] ** 2\n"
                    "    P[k] -= 3e-3 * (mom[k] / 0.1) / ((sq[k] / 0.001).sqrt() + 1e-8)\n")
    assert found is not None and found.descends and ast_text(found.source) == "g"
    defs = "def grads_of(x, y):\n    return [C * 1.0] * 7\n"
    loop = ("# Exercise 4\nparameters = [C, W1, b1, W2, b2, bngain, bnbias]\n"
            "for i in range(100):\n    ix = torch.randint(0, 10, (32,))\n"
            "    xb_, yb_ = Xtr[ix], Ytr[ix]\n    got = grads_of(xb_, yb_)\n"
            "    for p, grad in zip(parameters, got):\n        p.data += -0.1 * grad\n")
    training = lecture.read_lecture(MAKEMORE, [defs, loop]).training
    assert training is not None and "xb_, yb_ = Xb, Yb" in training, training
    assert "Xtr[ix]" not in training
