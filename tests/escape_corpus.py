"""Escape attempts against the sandbox, as data (issue 8). tests/test_escapes.py runs them.

Each attempt is learner code that tries to get out: write a file, start a process, read a secret,
change torch for later checks, kill or stall the worker, or pass a step with a value it did not
compute. Placeholders in the code are filled in by the test:

    TARGET      a fresh path (a quoted string) the attack tries to create; it must not exist after
    SECRET      a text file holding a secret token; the token must not come back
    SECRET_ZIP  a torch.save() archive holding the same token

`expect` is what the sandbox must do with it:

    refused     the check reports error kind "forbidden" or "runtime", and the message names the
                construct (one of `names`, when given)
    contained   any verdict but a pass, no error of kind "internal", nothing written, nothing leaked
                and torch's global state as it was
    timeout     a loop that swallows the time limit: stopped and reported as "timeout"

Every attempt, whatever `expect` says, must also leave no file behind, must not pass, must not
return any of `leaks` (or GLOBAL_LEAKS) in its output, and must keep stdout and the error message
within their caps. `worker` attempts also go through the real worker process; `engine=False`
ones only there (they would stall or crash the test process itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from textwrap import dedent

# Strings that only an escape can put in a result: the secret token, the tutor's own modules and
# files, interpreter objects (frames, cells, the builtins module) and the installation's paths.
GLOBAL_LEAKS = (
    "TOPSECRET",
    "tutor.core.engine",
    "tutor/core/engine",
    "tutor.sandbox",
    "tutor/sandbox",
    "site-packages",
    "lib-dynload",
    "Engine object",
    "<frame at",
    "<cell at",
    "StringIO object",
    "(built-in)>",
    "built-in function open",
    "<class 'object'>",
)

REFUSED, CONTAINED, TIMEOUT = "refused", "contained", "timeout"

# `object` is refused by name; its class is one method call away on any type.
OBJ = "O = int.mro()[-1]\n"


@dataclass(frozen=True)
class Attempt:
    id: str
    route: str
    code: str
    expect: str
    names: tuple[str, ...] = ()
    leaks: tuple[str, ...] = ()
    step: str = "atomic/probs"
    worker: bool = False
    engine: bool = True
    why: str = ""


def _a(id, route, code, expect, names=(), **kw) -> Attempt:
    head = OBJ if code.startswith(OBJ) else ""
    code = head + dedent(code[len(head):]).strip("\n") + "\n"
    return Attempt(id, route, code, expect, tuple(names), **kw)


MATCH = ("match", "case", "pattern", "mro")
FORMAT = ("format",)

ATTEMPTS: list[Attempt] = [
    # ---------------------------------------------------------------------------------------
    # match: class patterns read attributes by keyword, where no ast.Attribute node exists.
    _a("match-print-globals-open", "match", OBJ + """
        match print:
            case O(__globals__=g):
                g["builtins"].open(TARGET, "w").write("escaped")
        """, REFUSED, MATCH + ("__globals__",), worker=True),
    _a("match-sum-self-open", "match", OBJ + """
        match sum:
            case O(__self__=b):
                b.open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__self__",)),
    _a("match-self-import-os-system", "match", """
        O = str.mro()[-1]
        match len:
            case O(__self__=O(__import__=imp)):
                imp("os").system("touch " + TARGET)
        """, REFUSED, MATCH + ("__import__",), worker=True),
    _a("match-traceback-frame-globals", "match", OBJ + """
        try:
            1 / 0
        except ZeroDivisionError as e:
            match e:
                case O(__traceback__=O(tb_frame=O(f_back=O(f_globals=g)))):
                    g["builtins"].open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__traceback__",), worker=True),
    _a("match-exception-pattern-f-builtins", "match", """
        O = ValueError.mro()[-1]
        try:
            [][1]
        except IndexError as e:
            match e:
                case Exception(__traceback__=tb):
                    match tb:
                        case O(tb_frame=O(f_back=O(f_builtins={"open": op}))):
                            op(TARGET, "w").close()
        """, REFUSED, MATCH + ("__traceback__",)),
    _a("match-mapping-pattern-globals", "match", OBJ + """
        match print:
            case O(__globals__={"builtins": O(open=op)}):
                op(TARGET, "w").close()
        """, REFUSED, MATCH + ("__globals__",)),
    _a("match-subclasses-os-open", "match", OBJ + """
        match O:
            case O(__subclasses__=subs):
                for k in subs():
                    match k:
                        case O(__name__="_wrap_close", __init__=O(__globals__=g)):
                            g["close"](g["open"](TARGET, g["O_CREAT"] | g["O_WRONLY"]))
        """, REFUSED, MATCH + ("__subclasses__",)),
    _a("match-str-capture-bound-format", "match", """
        match "{0.__globals__[builtins]}":
            case str(format=fm):
                print(fm(print))
        """, REFUSED, MATCH + FORMAT),
    _a("match-case-str-capture-class", "match", """
        match "abc":
            case str(x):
                match x:
                    case str(__class__=k, __len__=ln):
                        print("captured", k.mro(), ln())
        """, REFUSED, MATCH + ("__class__",), leaks=("method-wrapper",)),
    _a("match-F-globals-real-torch-save", "match", OBJ + """
        match F.relu:
            case O(__globals__=g):
                g["torch"].save(probs, TARGET)
        """, REFUSED, MATCH + ("__globals__", "save"), worker=True),
    _a("match-torch-save-keyword", "match", OBJ + """
        match torch:
            case O(save=sv):
                sv(probs, TARGET)
        """, REFUSED, MATCH + ("save",)),
    _a("match-torch-from-file-keyword", "match", OBJ + """
        match torch:
            case O(from_file=ff):
                ff(TARGET, shared=True, size=8)
        """, REFUSED, MATCH + ("from_file",), worker=True),
    _a("match-math-loader-get-data", "match", OBJ + """
        match math:
            case O(__spec__=O(loader=ld)):
                print(ld.get_data(SECRET))
        """, REFUSED, MATCH + ("__spec__",)),
    _a("match-reduce-ex-rebuild-globals", "match", OBJ + """
        match probs:
            case O(__reduce_ex__=r):
                fn = r(2)[0]
        match fn:
            case O(__globals__=g):
                g["torch"].save(probs, TARGET)
        """, REFUSED, MATCH + ("__reduce_ex__", "save")),
    _a("match-or-pattern", "match", OBJ + """
        match print:
            case O(__wrapped__=g) | O(__globals__=g):
                g["builtins"].open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__globals__",)),
    _a("match-as-pattern", "match", OBJ + """
        match max:
            case O(__self__=O() as b):
                b.open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__self__",)),
    _a("match-guard-runs-the-call", "match", OBJ + """
        match min:
            case O(__self__=b) if b.open(TARGET, "w").close() is None:
                pass
        """, REFUSED, MATCH + ("__self__",)),
    _a("match-inside-a-function", "match", """
        def reach(fn):
            O = int.mro()[-1]
            match fn:
                case O(__self__=b):
                    return b
        reach(round).open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__self__",)),
    _a("match-signal-handler-off", "match", OBJ + """
        match print:
            case O(__globals__=g):
                s = g["signal"]
                s.signal(s.SIGALRM, s.SIG_IGN)
                g["builtins"].open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__globals__",), worker=True),
    _a("match-sys-getframe", "match", OBJ + """
        match divmod:
            case O(__self__=O(__import__=imp)):
                fr = imp("sys")._getframe(1)
        """, REFUSED, MATCH + ("__import__", "_getframe"),
        why="_getframe is also refused by the policy, but only once the match has run"),
    _a("match-class-of-tensor-subclasses", "match", OBJ + """
        match probs:
            case O(__class__=O(__mro__=mro)):
                print(mro)
        """, REFUSED, MATCH + ("__class__",)),
    _a("match-closure-cell-stdout-flood", "match", OBJ + """
        match print:
            case O(__closure__=(O(cell_contents=out),)):
                out.write("A" * 10**6)
        """, REFUSED, MATCH + ("__closure__",), worker=True),
    # ---------------------------------------------------------------------------------------
    # str.format / format_map: the field syntax walks attributes inside a string.
    _a("format-globals", "format", """
        print("{0.__globals__}".format(print))
        """, REFUSED, FORMAT, worker=True),
    _a("format-index-builtins-open", "format", """
        print("{0.__globals__[builtins].open}".format(print))
        """, REFUSED, FORMAT),
    _a("format-unbound-str-format-mro", "format", """
        print(str.format("{0.__class__.__mro__}", 1))
        """, REFUSED, FORMAT),
    _a("format-map-self", "format", """
        print("{x.__self__}".format_map({"x": sum}))
        """, REFUSED, FORMAT),
    _a("format-file-of-F", "format", """
        print("{0.__globals__[__file__]}".format(F.relu))
        """, REFUSED, FORMAT),
    _a("format-traceback-locals", "format", """
        try:
            1 / 0
        except ZeroDivisionError as e:
            print("{0.__traceback__.tb_frame.f_back.f_locals}".format(e))
        """, REFUSED, FORMAT, worker=True),
    _a("format-map-unbound-module-name", "format", """
        print(str.format_map("{p.__globals__[__name__]}", {"p": print}))
        """, REFUSED, FORMAT),
    _a("format-closure-cell", "format", """
        print("{0.__closure__[0].cell_contents!r}".format(print))
        """, REFUSED, FORMAT),
    _a("format-reads-refused-grad", "format", """
        print("{0.grad} {0.grad_fn} {0.requires_grad}".format(probs))
        """, REFUSED, FORMAT + ("grad",)),
    _a("format-through-list-index", "format", """
        print("{0[0].__globals__[torch].save}".format([F.relu]))
        """, REFUSED, FORMAT, leaks=("function save",)),
    _a("format-of-fstring-result", "format", """
        s = "{0.__globals__[__name__]}"
        print(f"{s}".format(print))
        """, REFUSED, FORMAT),
    _a("fstring-attribute-walk", "format", """
        print(f"{print.__globals__['builtins']}")
        """, REFUSED, ("__globals__",)),
    _a("fstring-nested-spec-walk", "format", """
        print(f"{sum.__self__!r:>{10}}")
        """, REFUSED, ("__self__",)),
    # ---------------------------------------------------------------------------------------
    # frames, code objects and the doors into the interpreter, written plainly.
    _a("frames-traceback-f-back-locals", "frames", """
        try:
            1 / 0
        except ZeroDivisionError as e:
            g = e.__traceback__.tb_frame.f_back.f_globals
            g["builtins"].open(TARGET, "w").close()
        """, REFUSED, ("__traceback__", "tb_frame", "f_back", "f_globals"), worker=True),
    _a("frames-generator-gi-frame", "frames", """
        def g():
            yield me.gi_frame.f_back.f_back.f_globals["builtins"].open(TARGET, "w")
        me = g()
        next(me)
        """, REFUSED, ("gi_frame", "f_back", "f_globals")),
    _a("frames-running-generator-via-match", "frames", OBJ + """
        def g():
            match me:
                case O(gi_frame=O(f_back=O(f_back=O(f_globals=gl)))):
                    gl["builtins"].open(TARGET, "w").close()
            yield 1
        me = g()
        next(me)
        """, REFUSED, MATCH + ("gi_frame",)),
    _a("frames-coroutine-cr-frame", "frames", """
        async def f():
            return 1
        c = f()
        c.cr_frame.f_back.f_globals["builtins"].open(TARGET, "w")
        """, REFUSED, ("async", "cr_frame")),
    _a("frames-gi-code-co-consts", "frames", """
        def g():
            yield "x"
        print(g().gi_code.co_consts, print.__code__.co_filename)
        """, REFUSED, ("gi_code", "co_consts", "__code__")),
    _a("frames-function-globals", "frames", """
        print.__globals__["builtins"].open(TARGET, "w").close()
        """, REFUSED, ("__globals__",)),
    _a("frames-closure", "frames", """
        print.__closure__[0].cell_contents.write("A" * 10**6)
        """, REFUSED, ("__closure__",)),
    _a("frames-code-filename", "frames", """
        print((lambda: 0).__code__.co_filename, F.relu.__code__.co_filename)
        """, REFUSED, ("__code__", "co_filename")),
    _a("frames-bound-method-self", "frames", """
        sum.__self__.open(TARGET, "w").close()
        """, REFUSED, ("__self__",)),
    _a("frames-print-self", "frames", """
        print(print.__self__)
        """, REFUSED, ("__self__",)),
    _a("frames-builtins-name", "frames", """
        __builtins__["open"](TARGET, "w").close()
        """, REFUSED, ("__builtins__",)),
    _a("frames-builtins-through-globals", "frames", """
        print.__globals__["__builtins__"]["open"](TARGET, "w").close()
        """, REFUSED, ("__globals__", "__builtins__")),
    _a("frames-subclasses-walk", "frames", """
        for k in ().__class__.__base__.__subclasses__():
            if k.__name__ == "_wrap_close":
                k.__init__.__globals__["system"]("touch " + TARGET)
        """, REFUSED, ("__class__", "__base__", "__subclasses__")),
    _a("frames-mro-subclasses", "frames", """
        for k in "".__class__.__mro__[-1].__subclasses__():
            print(k)
        """, REFUSED, ("__class__", "__mro__", "__subclasses__")),
    _a("frames-mro-method-subclasses", "frames", """
        for k in str.mro()[-1].__subclasses__():
            print(k)
        """, REFUSED, ("mro", "__subclasses__")),
    _a("frames-module-dict", "frames", """
        torch.nn.functional.__dict__["torch"].save(probs, TARGET)
        """, REFUSED, ("__dict__", "save")),
    _a("frames-reduce-ex", "frames", """
        probs.__reduce_ex__(2)[0].__globals__["torch"].save(probs, TARGET)
        """, REFUSED, ("__reduce_ex__", "save")),
    _a("frames-class-body", "frames", """
        class A:
            def f(self):
                return self.__class__.__init__.__globals__
        A().f()["torch"].save(probs, TARGET)
        """, REFUSED, ("__class__", "save"), worker=True),
    _a("frames-class-on-a-builtin", "frames", """
        class A(int):
            pass
        """, REFUSED, ("class",)),
    _a("frames-class-on-an-exception", "frames", """
        B = ValueError
        class A(B):
            pass
        """, REFUSED, ("class",)),
    _a("frames-class-attribute-on-a-tensor", "frames", """
        probs.data = torch.zeros_like(probs)
        """, REFUSED, ("data", "assign")),
    _a("frames-class-attribute-dunder-via-setter", "frames", """
        class A:
            pass
        a = A()
        a.x = 1
        A.x = print
        """, REFUSED, ("assign", "x")),
    _a("answer-backward-through-a-class-method", "answers", """
        class M:
            def backward(self, t):
                return t.backward()
        p = torch.tensor(probs.tolist(), requires_grad=True)
        M().backward((p.log() * dlogprobs).sum())
        """, REFUSED, ("backward",)),
    _a("answer-backward-as-a-class-attribute", "answers", """
        class M:
            backward = torch.Tensor.backward
        M.backward((probs.log() * dlogprobs).sum())
        """, REFUSED, ("backward",)),
    _a("answer-backward-from-a-tensor-into-a-class", "answers", """
        class M:
            pass
        m = M()
        m.backward = (probs.log() * dlogprobs).sum().backward
        m.backward()
        """, REFUSED, ("backward",)),
    _a("frames-tuple-assignment-onto-torch", "frames", """
        torch.save, x = print, 1
        """, REFUSED, ("assign", "save")),
    _a("frames-tuple-assignment-onto-a-tensor", "frames", """
        probs.data, x = torch.zeros_like(probs), 1
        """, REFUSED, ("assign", "data")),
    _a("frames-private-name-of-a-tensor", "frames", """
        print(probs._version, probs._base)
        """, REFUSED, ("_version", "_base")),
    _a("frames-private-name-of-torch", "frames", """
        torch._C._get_tracing_state()
        """, REFUSED, ("_C",)),
    _a("frames-private-name-of-a-function", "frames", """
        def f():
            pass
        f._x = 1
        print(f._x)
        """, REFUSED, ("_x", "assign")),
    _a("frames-super-of-a-builtin", "frames", """
        f = super(type, int).__call__
        print(f.__self__)
        """, REFUSED, ("__self__",)),
    _a("frames-property-on-a-builtin", "frames", """
        class A:
            p = property(print)
        A().p.__globals__
        """, REFUSED, ("__globals__",)),
    _a("frames-super-to-reach-globals", "frames", """
        class A:
            def f(self):
                return super().__init__.__globals__
        A().f()
        """, REFUSED, ("__globals__",)),
    _a("frames-class-getattr-hook", "frames", """
        class A:
            def __getattr__(self, name):
                return print
        print(A().anything)
        """, REFUSED, ("class", "__getattr__")),
    _a("frames-tensor-subclass", "frames", """
        class T(torch.Tensor):
            def __torch_function__(self, *args):
                return 0
        dprobs = T()
        """, REFUSED, ("class", "__torch_function__")),
    _a("frames-lambda-defaults", "frames", """
        f = lambda b=sum: b
        f.__defaults__[0].__self__.open(TARGET, "w").close()
        """, REFUSED, ("__defaults__", "__self__")),
    _a("frames-lambda-defaults-via-match", "frames", OBJ + """
        match (lambda b=max: b):
            case O(__defaults__=(O(__self__=bi),)):
                bi.open(TARGET, "w").close()
        """, REFUSED, MATCH + ("__defaults__",)),
    _a("frames-getattribute", "frames", """
        print.__getattribute__("__globals__")["builtins"].open(TARGET, "w").close()
        """, REFUSED, ("__getattribute__",)),
    _a("frames-object-getattribute", "frames", """
        object.__getattribute__(print, "__globals__")["builtins"].open(TARGET, "w").close()
        """, REFUSED, ("object", "__getattribute__")),
    _a("frames-type-name", "frames", """
        print(type(print).__subclasses__(type))
        """, REFUSED, ("type", "__subclasses__")),
    # getattr is the guard's own (tutor/sandbox/views.py): a computed name meets the same rules
    _a("frames-getattr-name", "frames", """
        getattr(print, "__glo" + "bals__")["builtins"].open(TARGET, "w").close()
        """, REFUSED, ("__globals__",)),
    _a("frames-getattr-rebound", "frames", """
        g = getattr
        g(g(print, "__self__"), "open")(TARGET, "w").close()
        """, REFUSED, ("__self__",)),
    _a("frames-globals-builtins", "frames", """
        globals()["__builtins__"]["open"](TARGET, "w").close()
        """, REFUSED, ("__builtins__",)),
    _a("frames-vars-of-a-function", "frames", """
        vars(print)["__globals__"]["open"](TARGET, "w").close()
        """, REFUSED, ("vars",)),
    _a("frames-vars-globals-dir", "frames", """
        print(vars(torch), globals(), dir())
        """, REFUSED, ("vars", "globals", "dir")),
    _a("frames-eval", "frames", """
        eval("__import__('os').system('touch " + TARGET + "')")
        """, REFUSED, ("eval",)),
    _a("frames-exec-compile", "frames", """
        exec(compile("open(" + repr(TARGET) + ", 'w')", "x", "exec"))
        """, REFUSED, ("exec", "compile")),
    _a("frames-import", "frames", """
        import os
        os.system("touch " + TARGET)
        """, REFUSED, ("import",)),
    _a("frames-from-import", "frames", """
        from pathlib import Path
        Path(TARGET).touch()
        """, REFUSED, ("import",)),
    _a("frames-dunder-import", "frames", """
        __import__("os").system("touch " + TARGET)
        """, REFUSED, ("__import__",)),
    _a("frames-exception-context", "frames", """
        try:
            try:
                1 / 0
            except ZeroDivisionError:
                [][0]
        except IndexError as e:
            print(e.__context__.__traceback__.tb_frame.f_globals)
        """, REFUSED, ("__context__", "__traceback__", "f_globals")),
    _a("frames-assign-torch-attribute", "frames", """
        torch.zeros = torch.ones
        torch.Tensor.add = torch.Tensor.sub
        """, REFUSED, ("zeros", "assign")),
    _a("frames-delete-torch-attribute", "frames", """
        del F.softmax
        """, REFUSED, ("softmax", "delet", "assign")),
    _a("frames-global-statement", "frames", """
        def f():
            global probs
            probs = None
        f()
        """, REFUSED, ("global",)),
    # ---------------------------------------------------------------------------------------
    # torch's public names that reach files, processes, compilers or global state.
    _a("torch-file-writer-creates", "torch", """
        w = torch.PyTorchFileWriter(TARGET)
        """, REFUSED, ("PyTorchFileWriter",), worker=True),
    _a("torch-file-writer-records", "torch", """
        w = torch.PyTorchFileWriter(TARGET)
        w.write_record("data", b"escaped", 7)
        w.write_end_of_file()
        """, REFUSED, ("PyTorchFileWriter",), worker=True),
    _a("torch-file-reader-secret", "torch", """
        r = torch.PyTorchFileReader(SECRET_ZIP)
        for name in r.get_all_records():
            print(r.get_record(name))
        """, REFUSED, ("PyTorchFileReader",), worker=True),
    _a("torch-compilation-unit-from-file", "torch", """
        cu = torch.CompilationUnit()
        cu.define("def f(p: str):\\n    return torch.from_file(p, True, 8)\\n", lambda name: torch)
        cu.f(TARGET)
        """, REFUSED, ("CompilationUnit", "define")),
    _a("torch-compilation-unit-source", "torch", """
        cu = torch.CompilationUnit("def f(x: int):\\n    print('ts')\\n    return x\\n")
        print(cu.f(1))
        """, REFUSED, ("CompilationUnit",)),
    _a("torch-import-ir-module", "torch", """
        torch.import_ir_module(torch.CompilationUnit(), SECRET_ZIP, None, {}, False)
        """, REFUSED, ("import_ir_module", "CompilationUnit")),
    _a("torch-import-ir-module-from-buffer", "torch", """
        torch.import_ir_module_from_buffer(torch.CompilationUnit(), "PK", None, {}, False)
        """, REFUSED, ("import_ir_module_from_buffer", "CompilationUnit")),
    _a("torch-save", "torch", """
        torch.save(probs, TARGET)
        """, REFUSED, ("save",)),
    _a("torch-load", "torch", """
        print(torch.load(SECRET_ZIP))
        """, REFUSED, ("load",)),
    _a("torch-from-file", "torch", """
        torch.from_file(TARGET, shared=True, size=4)
        """, REFUSED, ("from_file",)),
    _a("torch-untyped-storage-from-file", "torch", """
        torch.UntypedStorage.from_file(TARGET, True, 8)
        """, REFUSED, ("from_file", "UntypedStorage")),
    _a("torch-legacy-storage-from-file", "torch", """
        torch.ByteStorage.from_file(TARGET, True, 8)
        """, REFUSED, ("from_file", "ByteStorage")),
    _a("torch-storage-class", "torch", """
        s = torch.Storage(8)
        print(s.filename(), s.is_shared())
        """, REFUSED, ("Storage", "filename")),
    _a("torch-untyped-storage-resize-use-after-free", "torch", """
        s = dlogprobs.untyped_storage()
        s.resize_(0)
        dprobs = (1.0 / probs) * dlogprobs
        """, REFUSED, ("untyped_storage", "resize_"), worker=True, engine=False,
        why="a freed storage under a live tensor segfaults the process running it"),
    _a("torch-typed-storage", "torch", """
        st = probs.storage()
        st.resize_(0)
        """, REFUSED, ("storage", "resize_"), worker=True, engine=False,
        why="the legacy storage handle resizes the same memory"),
    _a("torch-numpy", "torch", """
        print(probs.numpy())
        """, REFUSED, ("numpy",)),
    _a("torch-data-ptr", "torch", """
        print(probs.data_ptr(), dlogprobs.untyped_storage().data_ptr())
        """, CONTAINED),
    _a("torch-share-memory", "torch", """
        probs.share_memory_()
        print(probs.is_shared())
        """, CONTAINED),
    _a("torch-set-autocast-enabled", "torch", """
        torch.set_autocast_enabled("cpu", True)
        """, CONTAINED, worker=True),
    _a("torch-set-autocast-dtype", "torch", """
        torch.set_autocast_dtype("cpu", torch.float16)
        """, CONTAINED),
    _a("torch-set-default-tensor-type", "torch", """
        torch.set_default_tensor_type(torch.DoubleTensor)
        """, CONTAINED),
    _a("torch-set-default-dtype", "torch", """
        torch.set_default_dtype(torch.float64)
        """, CONTAINED),
    _a("torch-set-default-device", "torch", """
        torch.set_default_device("meta")
        """, CONTAINED),
    _a("torch-set-rng-state", "torch", """
        s = torch.Generator().get_state()
        s[0] = 7
        torch.set_rng_state(s)
        """, CONTAINED),
    _a("torch-default-generator-set-state", "torch", """
        s = torch.Generator().get_state()
        s[1] = 9
        torch.default_generator.set_state(s)
        """, CONTAINED),
    _a("torch-use-deterministic-algorithms", "torch", """
        torch.use_deterministic_algorithms(True)
        """, CONTAINED),
    _a("torch-set-deterministic-debug-mode", "torch", """
        torch.set_deterministic_debug_mode("error")
        """, CONTAINED),
    _a("torch-set-float32-matmul-precision", "torch", """
        torch.set_float32_matmul_precision("medium")
        """, CONTAINED),
    _a("torch-autograd-set-detect-anomaly", "torch", """
        torch.autograd.set_detect_anomaly(True)
        """, CONTAINED),
    _a("torch-set-anomaly-enabled", "torch", """
        torch.set_anomaly_enabled(True)
        """, CONTAINED),
    _a("torch-set-printoptions", "torch", """
        torch.set_printoptions(precision=1, threshold=5)
        """, CONTAINED),
    _a("torch-set-flush-denormal", "torch", """
        torch.set_flush_denormal(True)
        """, CONTAINED),
    _a("torch-set-num-threads", "torch", """
        torch.set_num_threads(1)
        """, CONTAINED),
    _a("torch-set-num-interop-threads", "torch", """
        torch.set_num_interop_threads(1)
        """, CONTAINED),
    _a("torch-set-warn-always", "torch", """
        torch.set_warn_always(True)
        """, CONTAINED),
    _a("torch-held-inference-mode", "torch", """
        def g():
            with torch.inference_mode():
                yield 1
        held = g()
        next(held)
        """, CONTAINED, worker=True,
        why="a suspended generator keeps a mode on after the check's own `with` has closed"),
    _a("torch-held-no-grad", "torch", """
        def g():
            with torch.no_grad():
                yield 1
        held = g()
        next(held)
        """, CONTAINED),
    _a("torch-held-autocast", "torch", """
        def g():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                yield 1
        held = g()
        next(held)
        """, CONTAINED),
    _a("torch-jit", "torch", """
        torch.jit.save(torch.jit.script(lambda x: x), TARGET)
        """, REFUSED, ("jit", "save", "script")),
    _a("torch-ops", "torch", """
        torch.ops.aten.from_file(TARGET, True, 8)
        """, REFUSED, ("ops", "from_file", "aten")),
    _a("torch-library", "torch", """
        lib = torch.library.Library("aten", "IMPL")
        """, REFUSED, ("library",)),
    _a("torch-utils", "torch", """
        torch.utils.cpp_extension.load_inline("x", "int f() { return 0; }")
        """, REFUSED, ("utils",)),
    _a("torch-hub", "torch", """
        torch.hub.download_url_to_file("http://127.0.0.1:9/x", TARGET)
        """, REFUSED, ("hub",)),
    _a("torch-backends", "torch", """
        torch.backends.mkldnn.set_flags(False)
        print(torch.backends.cpu.get_cpu_capability())
        """, REFUSED, ("backends",)),
    _a("torch-classes", "torch", """
        print(torch.classes.load_library(TARGET))
        """, REFUSED, ("classes",)),
    _a("torch-fx", "torch", """
        print(torch.fx.symbolic_trace(torch.nn.Identity()).code)
        """, REFUSED, ("fx",)),
    _a("torch-nn-module-global-hook", "torch", """
        torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
        """, REFUSED, ("modules",)),
    _a("torch-nn-utils", "torch", """
        print(torch.nn.utils.parametrize)
        """, REFUSED, ("utils",)),
    _a("torch-nn-module-state", "torch", """
        m = torch.nn.Sequential(torch.nn.Identity())
        m.register_forward_hook(lambda *a: print("hooked"))
        print(m.state_dict().keys(), m(probs).shape)
        """, CONTAINED),
    _a("F-torch", "torch", """
        F.torch.save(probs, TARGET)
        """, REFUSED, ("functional.torch", "F.torch", "save")),
    _a("F-sys", "torch", """
        F.sys.modules["os"].system("touch " + TARGET)
        """, REFUSED, ("functional.sys", "F.sys", "attribute 'sys'")),
    _a("F-dict", "torch", """
        print(torch.nn.functional.__dict__.keys())
        """, REFUSED, ("__dict__",)),
    _a("F-handle-torch-function", "torch", """
        print(F.handle_torch_function(print, (), "x"))
        """, CONTAINED),
    _a("torch-get-file-path", "torch", """
        print(torch.get_file_path("x"))
        """, CONTAINED),
    _a("torch-prepare-multiprocessing", "torch", """
        torch.prepare_multiprocessing_environment(TARGET)
        """, CONTAINED),
    _a("torch-generator-get-state", "torch", """
        print(torch.Generator().get_state().shape)
        """, CONTAINED),
    _a("math-module-repr", "torch", """
        print(math, torch, F)
        """, CONTAINED, leaks=("from '",)),
    # ---------------------------------------------------------------------------------------
    # the builtins, print, exceptions that are not Exceptions, and the time limit.
    _a("builtins-open-name", "builtins", """
        open(TARGET, "w").close()
        """, REFUSED, ("open",)),
    _a("builtins-raise-system-exit", "builtins", """
        raise SystemExit(3)
        """, REFUSED, ("SystemExit",)),
    _a("builtins-raise-keyboard-interrupt", "builtins", """
        raise KeyboardInterrupt
        """, REFUSED, ("KeyboardInterrupt",)),
    _a("builtins-system-exit-found-by-match", "builtins", OBJ + """
        match Exception.mro()[1]:
            case O(__subclasses__=subs):
                for k in subs():
                    match k:
                        case O(__name__="SystemExit"):
                            raise k(3)
        """, REFUSED, MATCH + ("__subclasses__", "SystemExit"), worker=True),
    _a("builtins-keyboard-interrupt-found-by-match", "builtins", OBJ + """
        match Exception.mro()[1]:
            case O(__subclasses__=subs):
                for k in subs():
                    match k:
                        case O(__name__="KeyboardInterrupt"):
                            raise k()
        """, REFUSED, MATCH + ("__subclasses__", "KeyboardInterrupt"), worker=True),
    _a("builtins-huge-exception-message", "builtins", """
        raise ValueError("x" * 10**7)
        """, REFUSED, ("ValueError",), worker=True),
    _a("builtins-huge-assertion-message", "builtins", """
        assert False, "y" * 10**6
        """, REFUSED, ("AssertionError",)),
    _a("builtins-print-flood", "builtins", """
        for _ in range(10**4):
            print("z" * 1000)
        """, CONTAINED),
    _a("builtins-print-file-keyword", "builtins", """
        print("escaped", file=TARGET, flush=True)
        """, CONTAINED),
    _a("builtins-shadow-print", "builtins", """
        print = sum
        print([1, 2])
        """, CONTAINED),
    _a("builtins-recursion", "builtins", """
        def f(k):
            return f(k + 1)
        f(0)
        """, REFUSED, ("RecursionError", "recursion")),
    _a("builtins-input-breakpoint-help", "builtins", """
        breakpoint()
        input()
        help()
        """, REFUSED, ("breakpoint", "input", "help")),
    _a("builtins-exit-quit", "builtins", """
        exit(0)
        """, REFUSED, ("exit",)),
    _a("builtins-memoryview", "builtins", """
        print(memoryview(b"abc").obj)
        """, REFUSED, ("memoryview",)),
    _a("timeout-swallowed-by-except-exception", "builtins", """
        while True:
            try:
                while True:
                    pass
            except Exception:
                pass
        """, TIMEOUT, worker=True, engine=False),
    _a("timeout-swallowed-by-bare-except", "builtins", """
        while True:
            try:
                while True:
                    pass
            except:
                pass
        """, TIMEOUT, worker=True, engine=False),
    _a("timeout-loop-in-finally", "builtins", """
        try:
            while True:
                pass
        finally:
            while True:
                pass
        """, TIMEOUT, worker=True, engine=False),
    # ---------------------------------------------------------------------------------------
    # reading the answer: every route here ends with dprobs equal to autograd's, if it works.
    _a("answer-reference-through-frames", "answers", OBJ + """
        try:
            1 / 0
        except ZeroDivisionError as e:
            match e:
                case O(__traceback__=O(tb_frame=O(f_back=O(f_back=O(f_locals=loc))))):
                    dprobs = loc["batch"].reference[(loc["step"].id, "probs")].clone()
        """, REFUSED, MATCH + ("__traceback__",), worker=True),
    _a("answer-reference-through-format", "answers", """
        torch.set_printoptions(precision=10, sci_mode=True, threshold=10**9, linewidth=10**6)
        try:
            1 / 0
        except ZeroDivisionError as e:
            s = "{0.__traceback__.tb_frame.f_back.f_back.f_locals[batch].reference}".format(e)
        k = s.find("('atomic/probs', 'probs'): tensor(")
        body = s[k:].split("tensor(", 1)[1].split(")", 1)[0]
        rows = []
        for r in body.split("]"):
            nums = [float(x) for x in r.replace("[", " ").replace(",", " ").split() if x]
            if nums:
                rows.append(nums)
        dprobs = torch.tensor(rows)
        """, REFUSED, FORMAT + ("set_printoptions",), worker=True),
    _a("answer-autograd-through-match", "answers", OBJ + """
        match torch:
            case O(enable_grad=eg):
                pass
        p = probs.clone()
        match p:
            case O(requires_grad_=rg):
                rg()
        with eg():
            loss = (p.log() * dlogprobs).sum()
        match loss:
            case O(backward=bw):
                bw()
        match p:
            case O(grad=gr):
                dprobs = gr
        """, REFUSED, MATCH + ("enable_grad", "grad"), worker=True),
    _a("answer-engine-through-generator-frame", "answers", OBJ + """
        def g():
            match me:
                case O(gi_frame=O(f_back=O(f_back=O(f_locals=loc)))):
                    yield loc["self"].network
        me = g()
        lesson = next(me)
        b = lesson.main if lesson.main.n == n else lesson.heldout
        dprobs = b.reference[("atomic/probs", "probs")].clone()
        """, REFUSED, MATCH + ("gi_frame",)),
    _a("answer-gc-finds-the-batch", "answers", OBJ + """
        match sum:
            case O(__self__=O(__import__=imp)):
                gc = imp("gc")
        for ob in gc.get_objects():
            try:
                match ob:
                    case O(reference=ref, n=bn) if bn == n and ("atomic/probs", "probs") in ref:
                        dprobs = ref[("atomic/probs", "probs")].clone()
            except Exception:
                pass
        """, REFUSED, MATCH + ("__import__",)),
    _a("answer-real-autograd-from-F-globals", "answers", OBJ + """
        match F.relu:
            case O(__globals__=g):
                T = g["torch"]
        p = T.tensor(probs.tolist(), requires_grad=True)
        with T.enable_grad():
            (dprobs,) = T.autograd.grad((p.log() * dlogprobs).sum(), [p])
        """, REFUSED, MATCH + ("__globals__", "enable_grad", "autograd")),
    _a("answer-exec-the-step-solution", "answers", OBJ + """
        try:
            1 / 0
        except ZeroDivisionError as e:
            match e:
                case O(__traceback__=O(tb_frame=O(f_back=O(f_back=O(f_locals=loc, f_globals=g))))):
                    ns = {"torch": g["torch"], "probs": probs, "dlogprobs": dlogprobs}
                    g["builtins"].exec(loc["step"].solution, ns)
                    dprobs = ns["dprobs"]
        """, REFUSED, MATCH + ("__traceback__",)),
    _a("answer-grad-attribute", "answers", """
        dprobs = probs.grad
        """, REFUSED, ("grad",)),
    _a("answer-autograd-grad", "answers", """
        p = probs.clone().requires_grad_()
        (dprobs,) = torch.autograd.grad((p.log() * dlogprobs).sum(), [p])
        """, REFUSED, ("requires_grad_", "autograd")),
    _a("answer-torch-func", "answers", """
        dprobs = torch.func.grad(lambda p: (p.log() * dlogprobs).sum())(probs)
        """, REFUSED, ("func", "grad")),
    _a("answer-backward-via-keyword-argument", "answers", """
        p = torch.tensor(probs.tolist(), requires_grad=True)
        with torch.enable_grad():
            loss = (p.log() * dlogprobs).sum()
        loss.backward()
        dprobs = p.grad
        """, REFUSED, ("enable_grad", "backward", "grad")),
    # `__slots__` is open in a class's own body, as plain names: not Python's own names, not a
    # value worked out at run time, not read off anything but the learner's own classes.
    _a("slots-naming-the-instance-dict", "slots", """
        class A:
            __slots__ = ('__dict__',)
        """, REFUSED, ("__slots__",)),
    _a("slots-computed-at-run-time", "slots", """
        class A:
            __slots__ = tuple(['__class__'])
        """, REFUSED, ("__slots__",)),
    _a("slots-outside-a-class", "slots", """
        __slots__ = ('x',)
        """, REFUSED, ("__slots__",)),
    _a("slots-of-a-tensor", "slots", """
        print(torch.Tensor.__slots__, probs.__slots__)
        """, REFUSED, ("__slots__",), worker=True),
    _a("slots-of-a-builtin-type", "slots", """
        print(int.__slots__)
        """, REFUSED, ("__slots__",)),
    # functools: `wraps` dresses only the learner's own functions, and only those carry
    # attributes of their own; nothing of torch's is renamed or marked for a later check.
    _a("functools-wraps-dresses-a-torch-function", "functools", """
        def f(x):
            return x
        functools.wraps(f)(torch.exp)
        """, REFUSED, ("wraps",)),
    _a("functools-wraps-dresses-a-torch-python-function", "functools", """
        def f(x):
            return x
        functools.wraps(f)(F.relu)
        """, REFUSED, ("wraps",)),
    _a("functools-update-wrapper", "functools", """
        def f(x):
            return x
        functools.update_wrapper(torch.exp, f)
        """, REFUSED, ("update_wrapper",)),
    _a("functools-wrapped-read-back", "functools", """
        @functools.wraps(torch.exp)
        def f(x):
            return x
        print(f.__wrapped__)
        """, REFUSED, ("__wrapped__",)),
    _a("attribute-on-a-torch-function", "functools", """
        torch.exp.calls = 1
        """, REFUSED, ("calls",)),
    _a("attribute-on-a-python-function-of-torch", "functools", """
        F.relu.calls = 1
        """, REFUSED, ("calls",)),
    _a("underscore-attribute-on-a-function-of-yours", "functools", """
        def f(x):
            return x
        f._code = 1
        f.__defaults__ = (2,)
        """, REFUSED, ("__defaults__",)),
    _a("simple-namespace-with-an-underscore-field", "functools", """
        d = types.SimpleNamespace(__class__=int)
        """, REFUSED, ("__class__",)),
    _a("simple-namespace-field-set-through-getattr-of-its-dict", "functools", """
        d = types.SimpleNamespace(a=1)
        print(d.__dict__)
        """, REFUSED, ("__dict__",)),
    _a("a-method-given-to-torchs-tensor-class", "functools", """
        def leak(self):
            return 1
        torch.Tensor.leak = leak
        """, REFUSED, ("leak",)),
    _a("a-method-given-to-a-builtin-class", "functools", """
        def leak(self):
            return 1
        int.leak = leak
        """, REFUSED, ("leak",)),
    _a("functools-partial-of-setattr", "functools", """
        functools.partial(setattr, torch, 'exp')(None)
        """, REFUSED, ("setattr",)),
]

# Every route to a class object: what a class hands out when called, read on, or compared. An
# attempt that reads memory it did not write prints UNINIT when it finds anything but zeros.
UNINIT = ("UNINIT",)
NONZERO = '\n        print("UNINIT" if bool((x != 0).any()) else "zeros")\n'

CLASS_ATTEMPTS: list[Attempt] = [
    _a("class-type-legacy-sizes", "classes", """
        x = type(logprobs)(32, 27)""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-type-legacy-size-object", "classes", """
        x = type(logprobs)(logprobs.shape)""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-type-legacy-big-sizes", "classes", """
        x = type(probs)(1000, 1000)""" + NONZERO, CONTAINED, leaks=UNINIT, worker=True),
    _a("class-torch-tensor-legacy-sizes", "classes", """
        x = torch.Tensor(64, 64)""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-type-cdata", "classes", """
        x = type(logprobs)(cdata=12345)
        print(x)
        """, REFUSED, ("cdata",), worker=True,
        why="the legacy constructor wraps whatever address it is given: SIGSEGV"),
    _a("class-torch-tensor-cdata", "classes", """
        print(torch.Tensor(cdata=140000000000))
        """, REFUSED, ("cdata",), worker=True),
    _a("class-type-cdata-with-sizes", "classes", """
        print(type(dlogprobs)(3, cdata=4096))
        """, REFUSED, ("cdata",)),
    _a("class-type-cdata-through-dict-splat", "classes", """
        kw = {"cd" + "ata": 8}
        print(type(probs)(**kw))
        """, REFUSED, ("cdata",)),
    _a("class-type-unknown-keyword", "classes", """
        print(type(probs)(3, dtype=torch.float64))
        """, REFUSED, ("dtype",)),
    _a("class-unbound-new-empty", "classes", """
        x = torch.Tensor.new_empty(logprobs, 32, 27)""" + NONZERO, CONTAINED, leaks=UNINIT,
        worker=True),
    _a("class-type-new-empty-strided", "classes", """
        x = type(logprobs).new_empty_strided(logprobs, (32, 27), (27, 1))""" + NONZERO,
        CONTAINED, leaks=UNINIT),
    _a("class-type-new-empty-keywords", "classes", """
        x = type(probs).new_empty(probs, (500, 500), dtype=torch.float64)""" + NONZERO,
        CONTAINED, leaks=UNINIT),
    _a("class-unbound-new-empty-on-a-list", "classes", """
        x = torch.Tensor.new_empty([1, 2], 3)
        """, CONTAINED),
    _a("class-strided-gaps", "classes", """
        x = probs.new_empty_strided((4,), (1000,))
        y = x.unfold(0, 2, 1)
        x = torch.cat([x, y.flatten()])""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-empty-strided-overlap", "classes", """
        x = torch.empty_strided((64, 64), (0, 1))""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-legacy-new-on-class", "classes", """
        x = torch.Tensor.new(logprobs, 32, 27)""" + NONZERO, REFUSED, ("new",), leaks=UNINIT),
    _a("class-legacy-new-on-type", "classes", """
        x = type(probs).new(probs, 1000)""" + NONZERO, REFUSED, ("new",), leaks=UNINIT),
    _a("class-legacy-new-on-instance", "classes", """
        x = probs.new(32, 27)""" + NONZERO, REFUSED, ("new",), leaks=UNINIT),
    _a("class-legacy-from-untyped-storage", "classes", """
        x = type(probs)(dlogprobs.untyped_storage())
        """, REFUSED, ("untyped_storage",)),
    _a("class-unbound-untyped-storage", "classes", """
        s = torch.Tensor.untyped_storage(dlogprobs)
        s.resize_(0)
        """, REFUSED, ("untyped_storage",), worker=True),
    _a("class-unbound-storage", "classes", """
        print(type(probs).storage(probs).data_ptr())
        """, REFUSED, ("storage",)),
    _a("class-unbound-data-ptr", "classes", """
        print(type(probs).data_ptr(probs), torch.Tensor.const_data_ptr(probs))
        """, REFUSED, ("data_ptr",)),
    _a("class-unbound-set", "classes", """
        t = torch.zeros(1)
        type(t).set_(t, dlogprobs)
        """, REFUSED, ("set_",)),
    _a("class-unbound-resize", "classes", """
        x = torch.zeros(1)
        type(x).resize_(x, 10**6)""" + NONZERO, REFUSED, ("resize_",), leaks=UNINIT),
    _a("class-unbound-as-strided", "classes", """
        x = type(probs).as_strided(probs, (10**4,), (1,))""" + NONZERO, REFUSED,
        ("as_strided",), leaks=UNINIT),
    _a("class-unbound-as-subclass", "classes", """
        print(type(probs).as_subclass(probs, type(probs)))
        """, REFUSED, ("as_subclass",)),
    _a("class-make-subclass", "classes", """
        dprobs = type(probs)._make_subclass(type(probs), probs)
        """, REFUSED, ("_make_subclass",)),
    _a("class-share-memory-on-class", "classes", """
        type(probs).share_memory_(probs)
        """, REFUSED, ("share_memory_",)),
    _a("class-is-set-to", "classes", """
        print(probs.is_set_to(probs))
        """, REFUSED, ("is_set_to",)),
    _a("class-legacy-from-bytes", "classes", """
        x = torch.Tensor(b"\\x00" * 64)
        """, REFUSED, ("torch.Tensor",)),
    _a("class-asarray-bytes-writes-a-constant", "classes", """
        t = torch.asarray(b"abcdefgh", dtype=torch.uint8)
        t.fill_(0)
        print(b"abcdefgh")
        """, REFUSED, ("asarray",), worker=True),
    _a("class-asarray-bytes-float", "classes", """
        print(torch.asarray(b"\\x01" * 64))
        """, REFUSED, ("asarray",)),
    _a("class-frombuffer", "classes", """
        print(torch.frombuffer(b"abcd", dtype=torch.uint8))
        """, REFUSED, ("frombuffer",)),
    _a("class-from-dlpack", "classes", """
        print(torch.from_dlpack(probs))
        """, REFUSED, ("from_dlpack",)),
    _a("class-of-a-class", "classes", """
        K = type(type(probs))
        print(K("T", (type(probs),), {}))
        """, REFUSED, ("type() of a class",)),
    _a("class-of-a-class-via-torch-tensor", "classes", """
        print(type(torch.Tensor))
        """, REFUSED, ("type() of a class",)),
    _a("class-dunder-class", "classes", """
        print(probs.__class__(32, 27))
        """, REFUSED, ("__class__",)),
    _a("class-of-a-function-called", "classes", """
        f = type(F.relu)
        print(f(None, {}))
        """, REFUSED, ("calling type(",)),
    _a("class-of-print-called", "classes", """
        print(type(print)(sum, probs))
        """, REFUSED, ("calling type(",)),
    _a("class-of-a-lambda-called", "classes", """
        print(type(lambda: 0)(None, {}))
        """, REFUSED, ("calling type(",)),
    _a("class-of-a-module-called", "classes", """
        m = type(torch)("torch")
        print(m)
        """, REFUSED, ("calling type(",), worker=True),
    _a("class-of-a-generator-called", "classes", """
        def g():
            yield 1
        print(type(g())())
        """, REFUSED, ("calling type(",)),
    _a("class-of-a-builtin-called", "classes", """
        print(type(torch.zeros)(1))
        """, REFUSED, ("calling type(",)),
    _a("class-of-a-method-descriptor-called", "classes", """
        print(type(torch.Tensor.add)(1))
        """, REFUSED, ("calling type(",)),
    _a("class-of-an-iterator-called", "classes", """
        print(type(iter([probs]))([]))
        """, REFUSED, ("calling type(",)),
    _a("class-of-a-refusal-called", "classes", """
        try:
            probs.data_ptr()
        except Exception as e:
            K = type(e)
        print(K, K.__name__)
        K("raised by learner code")
        """, REFUSED, ("calling type(",), leaks=("tutor",)),
    _a("class-of-a-bound-tensor-method", "classes", """
        print(type(probs.add)(probs, 1))
        """, REFUSED, ("calling type(",)),
    _a("class-return-types-rebuilt", "classes", """
        r = probs.max(1)
        R = type(r)
        print(R, R((probs, probs)).values.shape, type(probs.max(1, keepdim=True)) is R)
        """, CONTAINED),
    _a("class-return-types-mro", "classes", """
        print(type(probs.max(1)).mro())
        """, REFUSED, ("mro",)),
    _a("class-dtype-called", "classes", """
        print(type(probs.dtype)())
        """, CONTAINED),
    _a("class-finfo-and-size-called", "classes", """
        print(type(torch.finfo(probs.dtype))(torch.float64).eps, type(probs.shape)([2, 3]))
        """, CONTAINED),
    _a("class-device-called", "classes", """
        dprobs = torch.zeros(32, 27, device=type(probs.device)("meta"))
        """, CONTAINED),
    _a("class-generator-bad-state", "classes", """
        g = type(torch.Generator())()
        g.set_state(torch.zeros(7, dtype=torch.uint8))
        """, CONTAINED),
    _a("class-exception-rebuilt", "classes", """
        try:
            torch.zeros(2) @ torch.zeros(3)
        except Exception as e:
            print(type(e).__name__, type(e)("again"), e.args[:1])
        """, CONTAINED),
    _a("class-exception-traceback", "classes", """
        try:
            1 / 0
        except Exception as e:
            print(e.with_traceback(None).__traceback__.tb_frame)
        """, REFUSED, ("__traceback__", "tb_frame")),
    _a("class-name-of-everything", "classes", """
        print(type(print).__name__, type(torch).__name__, F.relu.__name__, cmp.__name__)
        print(type(probs).__name__, type(probs.max(1)).__name__)
        """, CONTAINED),
    _a("class-the-type-builtin-itself", "classes", """
        print(type, type.__name__, type(type), type(type).__name__)
        type(type)(probs)
        """, REFUSED, ("calling type(",)),
    _a("class-name-that-is-not-a-string", "classes", """
        print(probs.__name__)
        """, CONTAINED),
    # nn.Parameter is the sandbox's stand-in: the tensor itself, nothing of torch's class.
    _a("class-nn-parameter", "classes", """
        p = torch.nn.Parameter(probs)
        print(type(p).__name__, p is probs)
        """, CONTAINED),
    _a("class-nn-module-insides", "classes", """
        class M(torch.nn.Module):
            pass
        m = M()
        print(m._parameters)
        """, REFUSED, ("_parameters",)),
    _a("class-nn-module-class", "classes", """
        m = torch.nn.Linear(27, 27)
        print(m(probs).shape, type(m).__name__)
        """, CONTAINED),
    _a("class-nn-layer-insides", "classes", """
        m = torch.nn.Linear(27, 27)
        print(m.forward.__globals__)
        """, REFUSED, ("__globals__",)),
    _a("class-storage-classes", "classes", """
        s = torch.UntypedStorage(64)
        print(torch.FloatStorage(8).tolist())
        """, REFUSED, ("UntypedStorage",)),
    _a("class-vars-of-a-class", "classes", """
        print(vars(type(probs))["new_empty"])
        """, REFUSED, ("vars",)),
    # the tensor method reached by a computed name is the guard's safe one, as `.new_empty`
    _a("class-getattr-by-string", "classes", """
        print(getattr(type(probs), "new_" + "empty")(probs, 3))
        """, CONTAINED),
    _a("class-super", "classes", """
        print(super(type(probs), probs).new_empty(3))
        """, REFUSED, ("super",)),
    _a("class-reduce", "classes", """
        f, args = probs.__reduce__()[:2]
        print(f(*args))
        """, REFUSED, ("__reduce__",)),
    _a("class-format-walks-class", "classes", """
        print("{0.__class__.__mro__}".format(probs))
        """, REFUSED, FORMAT),
    _a("class-index-add-out-of-bounds", "classes", """
        x = torch.zeros(4)
        x = x.index_add(0, torch.tensor([10**6]), torch.ones(1))""" + NONZERO, CONTAINED,
        leaks=UNINIT),
    _a("class-embedding-out-of-bounds", "classes", """
        x = F.embedding(torch.tensor([10**6, -5]), torch.zeros(3, 2))""" + NONZERO, CONTAINED,
        leaks=UNINIT),
    _a("class-put-out-of-bounds", "classes", """
        x = torch.zeros(3)
        x.put_(torch.tensor([2**40]), torch.ones(1))""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-unfold-past-the-end", "classes", """
        x = torch.zeros(3).unfold(0, 2, 10**9)""" + NONZERO, CONTAINED, leaks=UNINIT),
    _a("class-dtype-view-past-the-end", "classes", """
        x = torch.zeros(3)[1:].view(torch.uint8)[4:].view(torch.float64)""" + NONZERO,
        CONTAINED, leaks=UNINIT),
    _a("class-isinstance-helpers", "classes", """
        K = type(probs)
        dprobs = K(32, 27) if isinstance(probs, K) and issubclass(K, torch.Tensor) else None
        """, CONTAINED),
    _a("class-type-is-compared", "classes", """
        print(type(probs) is torch.Tensor, type(probs) == type(dlogprobs), type(3) is int)
        dprobs = type(probs)((1.0 / probs).tolist()) * 0
        """, CONTAINED),
]
ATTEMPTS += CLASS_ATTEMPTS

# Ordinary code that must keep working, with what it prints (not counted as attempts).
# ---------------------------------------------------------------------------------------------
# The sandbox's newer openings: records, torch.nn's layers, the attribute dict, imports it does not
# hold, small modules, builtins, a bounded as_strided and F.linear. Above all the gadget that hands
# `globals` to the sandbox's own code (a layer's forward, a field's default factory, a torch
# decorator) to be called from there, and what a real module reached that way would open.
# Gadget: a zero-argument call made by a tutor (or torch) Python function hands `globals()`
# (views.namespace_view, which reads sys._getframe(1)) the *tutor's* frame.
_SEQ_GADGET = "m = torch.nn.Sequential()\nm.forward = globals\ng = m()\n"
_REC_GADGET = ("@dataclasses.dataclass\nclass R:\n    g: dict = dataclasses.field("
              "default_factory=globals)\ng = R().g\n")
_NOGRAD_GADGET = "g = torch.no_grad()(globals)()\n"
_WRAPS_SYS = _NOGRAD_GADGET + (
    "def S():\n    pass\ng['functools'].wraps(g['sys'])(S)\n")

def _indented(text: str) -> str:
    # the bodies below are indented by 8 spaces and dedented by _a: indent the heads the same
    return "".join("        " + line + "\n" for line in text.splitlines())


_SEQ_GADGET, _REC_GADGET, _NOGRAD_GADGET, _WRAPS_SYS = map(
    _indented, (_SEQ_GADGET, _REC_GADGET, _NOGRAD_GADGET, _WRAPS_SYS))

OPENING_ATTEMPTS = [
    # ---------------------------------------------------------------- 1. dataclass records
    _a("rec-default-factory-globals", "records", _REC_GADGET + """
        print(sorted(g))
        print(g['LEARNER_CLASSES'], g['types'])
        """, REFUSED, ("globals", "default_factory"), leaks=("LEARNER_CLASSES", "WeakSet")),
    _a("rec-default-factory-locals", "records", """
        @dataclasses.dataclass
        class R:
            l: dict = dataclasses.field(default_factory=locals)
        print(R().l)
        """, REFUSED, leaks=("Field(name=",)),
    _a("rec-learner-classes-add-int", "records", _REC_GADGET + """
        g['LEARNER_CLASSES'].add(int)
        class Evil(int):
            pass
        print(Evil(3) + 1, "built on int")
        """, REFUSED, leaks=("built on int",)),
    _a("rec-missing-sentinel-object", "records", """
        @dataclasses.dataclass
        class R:
            x: int
        f = dataclasses.fields(R)[0]
        print(f.default, type(f.default))
        """, CONTAINED),
    _a("rec-default-factory-type", "records", """
        @dataclasses.dataclass
        class R:
            t: int = dataclasses.field(default_factory=type)
        print(R().t)
        """, CONTAINED),
    _a("rec-dataclass-on-tutor-layer", "records", """
        dataclasses.dataclass(torch.nn.Tanh)
        dataclasses.dataclass(attribute_dict)
        print(torch.nn.Tanh(), attribute_dict(a=1))
        t = torch.nn.Tanh(1)
        """, REFUSED, ("dataclass",)),
    _a("rec-dataclass-on-builtin", "records", """
        dataclasses.dataclass(int)
        """, REFUSED, ("dataclass",)),
    _a("rec-fields-non-dataclass", "records", """
        print(dataclasses.fields(torch))
        """, CONTAINED),
    _a("rec-asdict-self-reference", "records", """
        @dataclasses.dataclass
        class R:
            x: list
        l = []
        r = R(l)
        l.append(r)
        print(dataclasses.asdict(r))
        """, CONTAINED),
    _a("rec-asdict-torch-return-type", "records", """
        @dataclasses.dataclass
        class R:
            x: int
        print(dataclasses.asdict(R(probs.max(1))))
        print(dataclasses.asdict(R(probs.shape)))
        """, CONTAINED),
    _a("rec-replace-dunder-kwargs", "records", """
        @dataclasses.dataclass
        class R:
            x: int = 1
        r = R()
        print(dataclasses.replace(r, **{'__class__': int, '__dict__': {}}))
        """, CONTAINED),
    _a("rec-inherit-attribute-dict", "records", """
        @dataclasses.dataclass
        class R(attribute_dict):
            probs: int = 0
        r = R()
        print(r, r.get('probs'), dataclasses.asdict(r))
        """, CONTAINED),
    _a("rec-inherit-linear-fields", "records", """
        @dataclasses.dataclass
        class L(torch.nn.Linear):
            extra: int = 3
        l = L()
        print(l, dataclasses.fields(l))
        """, CONTAINED),
    _a("rec-post-init-ignored", "records", """
        @dataclasses.dataclass
        class R:
            x: int = 1
            def __post_init__(self):
                print("post init ran")
        R()
        """, REFUSED),
    _a("rec-field-name-private-dunder", "records", """
        @dataclasses.dataclass
        class R:
            _x: int = dataclasses.field(default_factory=lambda: print)
        r = R()
        print(r._x, dataclasses.asdict(r))
        """, CONTAINED),
    # ---------------------------------------------------------------- 2. nn layer stand-ins
    _a("nn-sequential-forward-globals-real-torch", "layers", _SEQ_GADGET + """
        T = g['torch']
        print(T, T.Tensor)
        """, REFUSED, ("globals", "forward")),
    _a("nn-staticmethod-forward-globals", "layers", """
        class M(torch.nn.Module):
            forward = staticmethod(globals)
        g = M()()
        print(g['builtins'], sorted(g)[:6])
        """, REFUSED, leaks=("module 'builtins'",)),
    _a("nn-real-torch-empty-uninitialised", "layers", _SEQ_GADGET + """
        u = g['torch'].empty(4096)
        print("nonzero uninitialised:", int((u != 0).sum()))
        dprobs = g['torch'].empty_like(probs)
        """, REFUSED, leaks=("nonzero uninitialised: ",)),
    _a("nn-real-torch-legacy-tensor", "layers", _SEQ_GADGET + """
        RT = g['torch'].Tensor
        print(RT is torch.Tensor, RT(8))
        """, REFUSED, leaks=("False tensor",)),
    _a("nn-real-torch-cdata-crash", "layers", _SEQ_GADGET + """
        RT = g['torch'].Tensor
        RT(cdata=4096)
        """, REFUSED),
    _a("nn-real-nn-module-subclass", "layers", _SEQ_GADGET + """
        Real = g['torch'].nn.Module
        g['LEARNER_CLASSES'].add(Real)
        class M(Real):
            def __init__(self):
                super().__init__()
        m = M()
        print(type(m), m.state_dict())
        """, REFUSED, leaks=("OrderedDict",)),
    _a("nn-learner-classes-private-tensor", "layers", _SEQ_GADGET + """
        g['LEARNER_CLASSES'].add(g['torch'].Tensor)
        print(getattr(probs, '_version'), getattr(probs, '_base'), getattr(probs, '_cdata'))
        """, REFUSED),
    _a("nn-monkeypatch-linear-forward", "layers", """
        def fake(self, x):
            return x
        torch.nn.Linear.forward = fake
        torch.nn.Module.parameters = fake
        print(torch.nn.Linear(3, 3)(probs).shape)
        """, REFUSED, ("assigning",)),
    _a("nn-register-buffer-on-class", "layers", """
        def fake(self, x):
            return 0
        torch.nn.Module.register_buffer(torch.nn.Linear, "forward", fake)
        print(torch.nn.Linear(2, 2)(probs))
        """, REFUSED),
    _a("nn-register-buffer-dunder", "layers", """
        m = torch.nn.Module()
        m.register_buffer("__class__", torch.nn.Linear)
        """, REFUSED, ("underscore",)),
    _a("nn-apply-cycle", "layers", """
        m = torch.nn.Sequential()
        m.me = m
        m.apply(print)
        """, CONTAINED),
    _a("nn-apply-globals", "layers", """
        m = torch.nn.Sequential()
        m.apply(vars)
        m.apply(locals)
        """, CONTAINED),
    _a("nn-moduledict-dunder-keys", "layers", """
        d = torch.nn.ModuleDict({'__class__': torch.nn.Linear(2, 2), '_layers': 1})
        print([n for n, p in d.named_parameters()], d.children())
        print(d['__class__'])
        """, CONTAINED),
    _a("nn-named-parameters-private", "layers", """
        m = torch.nn.Sequential(torch.nn.Linear(2, 2))
        m._hidden = torch.nn.Parameter(probs)
        print([n for n, p in m.named_parameters()], len(m.parameters()))
        """, CONTAINED),
    _a("nn-init-non-tensor", "layers", """
        torch.nn.init.normal_(torch)
        """, REFUSED),
    _a("nn-init-lesson-tensor-in-place", "layers", """
        torch.nn.init.zeros_(dlogprobs)
        dprobs = torch.zeros_like(probs)
        """, CONTAINED),
    _a("nn-sequential-of-builtins", "layers", """
        s = torch.nn.Sequential(vars, print, hash)
        print(s(1))
        """, CONTAINED),
    _a("nn-to-cuda-float", "layers", """
        m = torch.nn.Linear(2, 2).to('cuda').cuda().cpu().float()
        print(m.weight.device)
        """, CONTAINED),
    _a("nn-dropout-rng-state", "layers", """
        d = torch.nn.Dropout(0.5)
        for i in range(100):
            d(probs)
        l = torch.nn.Linear(1000, 1000)
        """, CONTAINED),
    # ---------------------------------------------------------------- 3. attribute_dict
    _a("adict-underscore-attr", "objects", """
        d = attribute_dict()
        d._x = 1
        print(d._x)
        """, CONTAINED),
    _a("adict-subclass-getitem-internals", "objects", """
        class G(attribute_dict):
            def __getitem__(self, k):
                return globals()
        print(sorted(G().anything)[:5])
        print(G().__class__)
        """, REFUSED),
    _a("adict-notebook-form-dunder", "objects", """
        class Grads(dict):
            __getattr__ = dict.__getitem__
            __setattr__ = dict.__setitem__
        g = Grads()
        g.dprobs = (1.0 / probs) * dlogprobs
        print(g.__class__, g.__dict__)
        """, REFUSED),
    _a("adict-overwrites-method-names", "objects", """
        d = attribute_dict()
        d.keys = 5
        d.items = globals
        print(d.keys, d.items)
        attribute_dict.keys = lambda self: 1
        """, REFUSED),
    # ---------------------------------------------------------------- 4. Unavailable imports
    _a("unavail-os-system", "objects", """
        os = not_in_sandbox('os')
        os.system('touch ' + TARGET)
        """, REFUSED),
    _a("unavail-dunder-chain", "objects", """
        np = not_in_sandbox('numpy')
        print(getattr(np, '__class__'), np.random.seed(0))
        """, REFUSED),
    _a("unavail-direct-name", "objects", """
        u = not_in_sandbox("tqdm.tqdm")
        print(u(globals), u.name, not_in_sandbox("x").y.z)
        """, CONTAINED),
    _a("unavail-matplotlib-savefig", "objects", """
        plt = not_in_sandbox('matplotlib.pyplot')
        plt.plot([1, 2]); plt.savefig(TARGET); plt.show()
        trange = not_in_sandbox('tqdm.trange')
        for i in trange(3):
            pass
        print(not_in_sandbox('tqdm.tqdm')(globals) is globals, plt.savefig(TARGET))
        """, CONTAINED),
    _a("unavail-str-of-learner-object", "objects", """
        class S:
            def __str__(self):
                return sorted(globals())[0]
        u = not_in_sandbox(S())
        print(repr(u))
        """, CONTAINED),
    # ---------------------------------------------------------------- 5. small modules
    _a("itertools-c-loop-stall", "modules", """
        any(itertools.repeat(0))
        """, TIMEOUT),
    _a("itertools-product-memory", "modules", """
        for _ in itertools.product(range(10**6), repeat=3):
            pass
        """, TIMEOUT),
    _a("itertools-tee-count-list", "modules", """
        a, b = itertools.tee(itertools.count())
        print(max(zip(itertools.islice(a, 10**12), b)))
        """, TIMEOUT),
    _a("time-busy-wait", "modules", """
        t = time.monotonic()
        while time.monotonic() < t + 60:
            pass
        """, TIMEOUT),
    _a("time-sleep-refused", "modules", """
        time.sleep(30)
        """, REFUSED, ("sleep",)),
    _a("hashlib-object-attrs", "modules", """
        h = hashlib.sha256(b'x')
        print(h.name, h.digest_size, h.copy().hexdigest())
        print(h.__class__)
        """, REFUSED),
    _a("hashlib-real-functools-by-name", "modules", _WRAPS_SYS + """
        def H():
            pass
        g['functools'].wraps(S.modules['hashlib'])(H)
        print(sorted(H.algorithms_available)[:3], H.new)
        """, REFUSED),
    _a("random-instance-state", "modules", """
        r = random.Random(7)
        s = r.getstate()
        r.setstate((3, tuple([0] * 624) + (624,), None))
        print(r.random(), r.getrandbits(64))
        random.seed(1)
        """, CONTAINED),
    _a("random-getrandbits-huge", "modules", """
        r = random.Random(7)
        r.getrandbits(2 ** 36)
        """, CONTAINED),
    _a("pad-sequence-weird", "modules", """
        print(rnn_utils.pad_sequence([probs, probs[:3]], batch_first=True,
                                     padding_value=float("nan")).shape)
        rnn_utils.pad_sequence([probs, 5])
        """, CONTAINED),
    _a("pad-sequence-empty", "modules", """
        rnn_utils.pad_sequence([])
        """, CONTAINED),
    # ---------------------------------------------------------------- 6. builtins
    _a("hasattr-oracle", "builtins", """
        print(hasattr(print, '__globals__'), hasattr(probs, 'grad'), hasattr(torch, 'save'))
        print(hasattr(probs, '__class__'), hasattr(globals, '__self__'))
        """, CONTAINED),
    _a("hash-address-leak", "builtins", """
        h = hash(torch)
        print(hex(((h << 4) | (h >> 60)) & (2**64 - 1)))
        """, CONTAINED),
    _a("chr-escape-sequences", "builtins", """
        print(chr(27) + "[2J" + chr(7) + chr(0x202e) + "PASSED")
        """, CONTAINED),
    _a("complex-huge-and-oct", "builtins", """
        print(complex('1e400+1e400j'), oct(-1), bin(2**100), ord(chr(0x10ffff)))
        chr(0x110000)
        """, CONTAINED),
    # ---------------------------------------------------------------- 7. as_strided
    _a("strided-noncontiguous", "torch", """
        probs.T.as_strided((10,), (1,))
        """, REFUSED, ("contiguous",)),
    _a("strided-negative-stride", "torch", """
        torch.as_strided(probs, (3,), (-1,), 5)
        """, REFUSED),
    _a("strided-past-end", "torch", """
        x = probs.flatten()
        y = x[5:10]
        print(y.as_strided((100,), (1,)))
        """, REFUSED),
    _a("strided-zero-size-huge-offset", "torch", """
        z = probs.as_strided((0,), (1,), 10**9)
        print(z.storage_offset())
        w = z.as_strided((4,), (1,))
        """, REFUSED),
    _a("strided-size1-huge-stride-transpose", "torch", """
        v = probs.as_strided((1, 5), (10**9, 1))
        w = v.transpose(0, 1).expand(5, 7).contiguous()
        u = v.as_strided((2,), (10**9,))
        """, REFUSED),
    _a("strided-dtype-view", "torch", """
        b = probs.view(torch.uint8)
        c = b[1:].as_strided((probs.numel() * 4,), (1,))
        """, REFUSED),
    _a("strided-unbound-class-method", "torch", """
        print(torch.Tensor.as_strided(probs, (2,), (1,), probs.numel() + 5))
        """, REFUSED),
    _a("strided-real-torch-via-gadget", "torch", _SEQ_GADGET + """
        x = probs.flatten()[:4]
        print(g['torch'].as_strided(x, (probs.numel(),), (1,)).shape)
        """, REFUSED),
    # ---------------------------------------------------------------- 8. F.linear
    _a("flinear-non-tensor-weight", "torch", """
        print(F.linear(probs, attribute_dict(T=probs.T)))
        """, CONTAINED),
    _a("flinear-property-T", "torch", """
        class W:
            T = property(vars)
        print(F.linear(probs, W()))
        """, CONTAINED),
    # ------------------------------------ full chain (an older gadget + functools by name)
    _a("chain-nograd-wraps-sys-os", "frames", _WRAPS_SYS + """
        def O():
            pass
        g['functools'].wraps(S.modules['os'])(O)
        print(O.getcwd())
        O.system('touch ' + TARGET)
        """, REFUSED),
    _a("chain-builtins-open-secret", "frames", _WRAPS_SYS + """
        def B():
            pass
        g['functools'].wraps(S.modules['builtins'])(B)
        try:
            print(B.open(SECRET).read())
        except Exception as e:
            print("read:", e)
        B.open(TARGET, 'w').write('x')
        """, REFUSED),
    _a("chain-setattr-torch-global", "frames", _WRAPS_SYS + """
        def B():
            pass
        g['functools'].wraps(S.modules['builtins'])(B)
        def T():
            pass
        g['functools'].wraps(S.modules['torch'])(T)
        getattr(T, 'set_default' + '_dtype')(torch.float64)
        getattr(T, 'manual' + '_seed')(123)
        B.setattr(S.modules['torch'], 'tanh', lambda x: x)
        print(torch.get_default_dtype(), torch.tanh(torch.tensor(5.0)))
        """, REFUSED),
    _a("chain-gc-hunt-reference", "frames", _WRAPS_SYS + """
        def G():
            pass
        g['functools'].wraps(S.modules['gc'])(G)
        n = 0
        for o in G.get_objects():
            if isinstance(o, dict) and 'dprobs' in o:
                n += 1
        print("dicts holding dprobs:", n)
        """, REFUSED),
    _a("chain-signal-parent", "frames", _WRAPS_SYS + """
        def O():
            pass
        g['functools'].wraps(S.modules['os'])(O)
        O.kill(O.getppid(), 0)
        print("may signal parent", O.getppid())
        """, REFUSED, leaks=("may signal parent",)),
    _a("nn-layer-repr-leaks-module", "layers", """
        print(torch.nn.Linear(2, 2), torch.nn.Module())
        """, CONTAINED),
    _a("rec-dataclass-rewrites-tutor-init", "records", """
        dataclasses.dataclass(attribute_dict)
        d = attribute_dict(a=1)
        """, REFUSED, ("dataclass",)),
    _a("nn-sequential-forward-locals", "layers", """
        m = torch.nn.Sequential()
        m.forward = locals
        print(m())
        """, REFUSED, leaks=("'args'",)),
    _a("chain-real-functools-wraps-torch-globals", "frames", _WRAPS_SYS + """
        def T():
            pass
        g['functools'].wraps(S.modules['torch'])(T)
        getattr(T, 'set_default' + '_dtype')(torch.float64)
        print(torch.get_default_dtype())
        """, REFUSED, leaks=("torch.float64",)),
    _a("chain-real-torch-save-via-wraps", "frames", _WRAPS_SYS + """
        def T():
            pass
        g['functools'].wraps(S.modules['torch'])(T)
        getattr(T, 'sa' + 've')(probs, TARGET)
        """, REFUSED),
    _a("nn-gadget-functools-by-name", "layers", _SEQ_GADGET + """
        g['LEARNER_CLASSES'].add(g['torch'].nn.Linear)
        lin = g['torch'].nn.Linear(2, 2)
        lin.forward = globals
        h = lin()
        print(h['functools'].wraps, h['inspect'])
        """, REFUSED, leaks=("functools.py",)),
]
ATTEMPTS += OPENING_ATTEMPTS


CONTROLS = [
    ("percent-formatting", 'print("%s and %d" % ("a", 3))\n', "a and 3\n"),
    ("shapes-and-loops", "for _ in range(2):\n    print(probs.shape[1])\n", "27\n27\n"),
    ("lambda-and-comprehension", "f = lambda t: t * 2\nprint([f(i) for i in range(3)])\n",
     "[0, 2, 4]\n"),
    ("correct-answer", "dprobs = (1.0 / probs) * dlogprobs\n", ""),
    ("a-class-with-static-and-class-methods-and-super",
     "class A:\n    def __init__(self, k):\n        self.k = k\n"
     "    @staticmethod\n    def twice(x):\n        return 2 * x\n"
     "    @classmethod\n    def make(cls):\n        return cls(3)\n"
     "    @property\n    def kk(self):\n        return self.k * self.k\n"
     "class B(A):\n    def __init__(self):\n        super().__init__(5)\n"
     "print(A.twice(4), A.make().k, B().kk)\n", "8 3 25\n"),
    ("a-class-with-slots-read-back",
     "class G:\n    __slots__ = ('dW', 'db')\n"
     "    def names(self):\n        return [s.upper() for s in self.__slots__]\n"
     "g = G()\ng.dW = dlogprobs\nprint(g.names(), G.__slots__, g.dW.shape[1])\n",
     "['DW', 'DB'] ('dW', 'db') 27\n"),
    ("a-decorator-of-yours-with-functools",
     "def keep(fn):\n    @functools.wraps(fn)\n    def wrapper(d):\n"
     "        wrapper.calls += 1\n        return fn(d).clone()\n"
     "    wrapper.calls = 0\n    return wrapper\n"
     "@keep\ndef back(d):\n    return d / probs\n"
     "dprobs = back(dlogprobs)\nadd = functools.partial(functools.reduce, lambda a, b: a + b)\n"
     "print(back.calls, back.__name__, add([1, 2, 3]))\n",
     "1 back 6\n"),
    ("a-simple-namespace-record",
     "d = types.SimpleNamespace(k=2)\nd.dprobs = dlogprobs / probs\n"
     "print(d.k, d.dprobs.shape[1])\n",
     "2 27\n"),
    ("a-class-given-a-method-afterwards",
     "class G:\n    pass\ndef twice(self, t):\n    return 2 * t\nG.twice = twice\n"
     "print(G().twice(3))\n", "6\n"),
    ("attributes-assigned-from-a-tuple",
     "class A:\n    pass\na = A()\na.x, (b, a.y) = 1, (2, 3)\nprint(a.x, b, a.y)\n",
     "1 2 3\n"),
    ("a-class-with-private-names-repr-and-getattr",
     "class A:\n    def __init__(self):\n        self._g = {'x': 1}\n"
     "    def __repr__(self):\n        return 'A'\n"
     "a = A()\na._y = 2\nprint(a, a._g['x'], a._y)\n",
     "A 1 2\n"),
    ("a-model-class-with-its-own-backward",
     "class M:\n    def backward(self, d):\n        return d / probs\n"
     "dprobs = M().backward(dlogprobs)\nprint(dprobs.shape[1])\n", "27\n"),
    ("type-of-a-tensor", "print(type(probs), type(probs) is torch.Tensor)\n",
     "<class 'torch.Tensor'> True\n"),
    ("type-name-and-isinstance",
     "print(type(probs).__name__, isinstance(probs, type(dlogprobs)), type(3).__name__)\n",
     "Tensor True int\n"),
    ("types-of-results", "r = probs.max(1, keepdim=True)\nprint(type(r.values), type(r), "
     "type(probs.shape), type(probs.dtype))\n",
     "<class 'torch.Tensor'> <class 'torch.return_types.max'> <class 'torch.Size'> "
     "<class 'torch.dtype'>\n"),
    ("zeros-from-every-constructor", "print(torch.Tensor(2).tolist(), type(probs)(1, 2).tolist(), "
     "torch.Tensor.new_empty(probs, 2).tolist(), torch.Tensor([1, 2]).tolist())\n",
     "[0.0, 0.0] [[0.0, 0.0]] [0.0, 0.0] [1.0, 2.0]\n"),
]
