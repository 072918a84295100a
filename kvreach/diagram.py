"""The request lifecycle diagram (Mermaid ``stateDiagram-v2``), generated from
``kvreach.spec.lifecycle.TRANSITIONS`` and the store rules, so that it cannot
drift from what the proofs check.

Data flows one way: this module imports the spec; the spec never imports it.

Everything on the diagram is derived:

- states: the phases the guards tell apart (prompt not computed /
  computed, see :data:`PHASES`) and one final state per end status of the
  table; the initial state is the phase ``spec.lifecycle.init`` lies in;
- edges: one labelled edge per table entry. Its sources and targets are the
  phases where Z3 finds the guard (and the new frontier) satisfiable under
  ``SymConfig.well_formed()``; several sources meet in a ``<<choice>>``
  junction before the labelled edge, several targets leave from one after it;
- labels: the entry's name, its guard and frontier update printed from the Z3
  terms themselves (applied to symbols ``f``, ``P``, ``sched``, ``budget``),
  and the vLLM function it models;
- the note: the store step every transition ends with, printed from the
  table's ``tokens_after`` / ``num_tokens`` (simplified under each guard) and
  from each rule's ``StoreStep`` terms.

``render()`` is deterministic (same table, same text). ``kvreach diagram``
writes it into docs/lifecycle.md between :data:`BEGIN` and :data:`END`;
``kvreach diagram --check`` fails when the committed block differs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterable, Sequence

import z3

from kvreach.spec import lifecycle as lc
from kvreach.spec.config import SymConfig
from kvreach.spec.evaluate import free_consts
from kvreach.spec.rules import RULES

BEGIN = "<!-- BEGIN GENERATED lifecycle -->"
END = "<!-- END GENERATED lifecycle -->"
DOC = Path("docs/lifecycle.md")  # the page holding the block, in the repository root

# Phases of a running request, as predicates on the frontier f: the guards
# only ever compare f with the prompt length P.
PHASES: tuple[tuple[str, str, Callable], ...] = (
    ("Prefilling", "prompt not computed", lambda s, f: z3.And(0 <= f, f < s.P)),
    ("Decoding", "prompt computed", lambda s, f: f >= s.P),
)


# ---------------------------------------------------------------------------
# symbols and printing
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Symbols:
    s: SymConfig
    pre: lc.State
    sched: z3.ArithRef
    budget: z3.ArithRef

    @staticmethod
    def make() -> "Symbols":
        s = dataclasses.replace(SymConfig.fresh("diagram_"), P=z3.Int("P"))
        pre = lc.State(z3.Int("f"), z3.Int("cursor"), z3.Bool("stored"), z3.Bool("ended"),
                       load_failed=z3.Bool("load_failed"))  # the failed-load ghost (0.34.0)
        return Symbols(s, pre, z3.Int("sched"), z3.Int("budget"))

    def assumptions(self) -> list:
        return [self.s.well_formed(), self.budget >= 1, z3.Not(self.pre.ended)]


_CMP = {
    z3.Z3_OP_LE: "≤", z3.Z3_OP_GE: "≥", z3.Z3_OP_LT: "<", z3.Z3_OP_GT: ">",
    z3.Z3_OP_EQ: "=",
}
_FLIP = {"≤": "≥", "≥": "≤", "<": ">", ">": "<", "=": "="}


def _minmax(e: z3.ExprRef) -> str | None:
    """``If(a >= b, a, b)`` -> max, ``If(a <= b, a, b)`` -> min (and flips)."""
    c, a, b = e.children()
    if not z3.is_app(c) or c.decl().kind() not in _CMP or c.num_args() != 2:
        return None
    x, y = c.children()
    op = _CMP[c.decl().kind()]
    if x.eq(b) and y.eq(a):
        x, y, op = y, x, _FLIP[op]
    if not (x.eq(a) and y.eq(b)):
        return None
    if op in ("≥", ">"):
        return f"max({show(a)}, {show(b)})"
    if op in ("≤", "<"):
        return f"min({show(a)}, {show(b)})"
    return None


def _paren(e: z3.ExprRef, parent: str) -> str:
    text = show(e)
    if z3.is_and(e) or z3.is_or(e) or (parent in "*/%-" and (z3.is_add(e) or z3.is_sub(e))):
        return f"({text})"
    return text


def _as_le(e: z3.ExprRef):
    """``(lhs, op, rhs)`` with op ``≤``/``<`` for a comparison (``≥``/``>``
    flipped), else None."""
    if not z3.is_app(e) or e.num_args() != 2:
        return None
    k = e.decl().kind()
    if k in (z3.Z3_OP_LE, z3.Z3_OP_LT):
        return e.arg(0), _CMP[k], e.arg(1)
    if k in (z3.Z3_OP_GE, z3.Z3_OP_GT):
        return e.arg(1), _FLIP[_CMP[k]], e.arg(0)
    return None


def _chain(conjuncts: Sequence[z3.ExprRef]) -> list[str]:
    """Render ``a ≤ b, b ≤ c`` (or ``b ≥ a, b ≤ c``) as ``a ≤ b ≤ c``."""
    out: list[str] = []
    i = 0
    while i < len(conjuncts):
        a = _as_le(conjuncts[i])
        b = _as_le(conjuncts[i + 1]) if i + 1 < len(conjuncts) else None
        if a is not None and b is not None and a[2].eq(b[0]):
            out.append(f"{show(a[0])} {a[1]} {show(a[2])} {b[1]} {show(b[2])}")
            i += 2
            continue
        out.append(_paren(conjuncts[i], "∧"))
        i += 1
    return out


def show(e: z3.ExprRef) -> str:
    """A Z3 term in readable infix (``∧ ∨ ¬ ≤ ≥ ≠``, ``max``/``min``)."""
    if z3.is_int_value(e):
        return str(e.as_long())
    if z3.is_true(e):
        return "true"
    if z3.is_false(e):
        return "false"
    if z3.is_const(e):
        return e.decl().name()
    k = e.decl().kind()
    if k == z3.Z3_OP_AND:
        return " ∧ ".join(_chain(e.children()))
    if k == z3.Z3_OP_OR:
        return " ∨ ".join(_paren(c, "∨") for c in e.children())
    if k == z3.Z3_OP_NOT:
        c = e.arg(0)
        if z3.is_eq(c):
            return f"{show(c.arg(0))} ≠ {show(c.arg(1))}"
        return f"¬{_paren(c, '¬') if not z3.is_const(c) else show(c)}"
    if k == z3.Z3_OP_DISTINCT and e.num_args() == 2:
        return f"{show(e.arg(0))} ≠ {show(e.arg(1))}"
    if k in _CMP:
        return f"{show(e.arg(0))} {_CMP[k]} {show(e.arg(1))}"
    if k == z3.Z3_OP_ADD:
        text = show(e.arg(0))
        for c in e.children()[1:]:
            if z3.is_int_value(c) and c.as_long() < 0:
                text += f" - {-c.as_long()}"
            else:
                text += f" + {_paren(c, '+')}"
        return text
    if k == z3.Z3_OP_SUB:
        return " - ".join([show(e.arg(0))] + [_paren(c, "-") for c in e.children()[1:]])
    if k == z3.Z3_OP_MUL:
        return " * ".join(_paren(c, "*") for c in e.children())
    if k == z3.Z3_OP_IDIV:
        return f"{_paren(e.arg(0), '/')} // {_paren(e.arg(1), '/')}"
    if k == z3.Z3_OP_MOD:
        return f"{_paren(e.arg(0), '%')} % {_paren(e.arg(1), '%')}"
    if k == z3.Z3_OP_ITE:
        mm = _minmax(e)
        if mm is not None:
            return mm
        return f"(if {show(e.arg(0))} then {show(e.arg(1))} else {show(e.arg(2))})"
    return str(e)


# ---------------------------------------------------------------------------
# Z3 questions
# ---------------------------------------------------------------------------


# Each feasibility question within this many Z3 resource units (never a
# wall-clock limit: the diagram must not depend on machine load); the
# table's questions spend at most about 12,000 units each.
DIAGRAM_RLIMIT = 20_000_000


def _sat(*fs) -> bool | None:
    """True / False, or None when Z3 gives up (then nothing is decided)."""
    solver = z3.Solver()
    solver.set("rlimit", DIAGRAM_RLIMIT)
    solver.add(*fs)
    r = solver.check()
    return None if r == z3.unknown else r == z3.sat


def _possible(*fs) -> bool:
    r = _sat(*fs)
    if r is None:
        raise RuntimeError("diagram: Z3 gave up on a feasibility question")
    return r


def _valid(ctx: list, e: z3.BoolRef) -> bool:
    return _sat(*ctx, z3.Not(e)) is False


def _fold(e: z3.ExprRef) -> z3.ExprRef:
    """Sum the integer constants of a ``+``/``-`` term (``f + 1 - 1`` -> ``f``)."""
    if not (z3.is_add(e) or z3.is_sub(e)):
        return e
    terms: list[tuple[int, z3.ExprRef]] = []

    def flat(x, sign):
        if z3.is_add(x):
            for ch in x.children():
                flat(ch, sign)
        elif z3.is_sub(x):
            flat(x.arg(0), sign)
            for ch in x.children()[1:]:
                flat(ch, -sign)
        else:
            terms.append((sign, x))
    flat(e, 1)
    k = sum(sign * t.as_long() for sign, t in terms if z3.is_int_value(t))
    rest = [(sign, t) for sign, t in terms if not z3.is_int_value(t)]
    if not rest or rest[0][0] < 0:
        return e
    out = rest[0][1]
    for sign, t in rest[1:]:
        out = out + t if sign > 0 else out - t
    return out + k if k > 0 else (out - (-k) if k < 0 else out)


def _prune(e: z3.ExprRef) -> z3.ExprRef:
    """Cut the branches a constant decides (no solver): ``If(false, a, b)``
    -> ``b``, ``And(.., false, ..)`` -> ``false``, ``Not(false)`` -> ``true``
    (e.g. vllm-0.33's reconsideration while running)."""
    if not z3.is_app(e) or e.num_args() == 0:
        return e
    k = e.decl().kind()
    if k == z3.Z3_OP_ITE:
        c = _prune(e.arg(0))
        if z3.is_true(c) or z3.is_false(c):
            return _prune(e.arg(1) if z3.is_true(c) else e.arg(2))
        return z3.If(c, _prune(e.arg(1)), _prune(e.arg(2)))
    if k in (z3.Z3_OP_AND, z3.Z3_OP_OR):
        stop, unit = (z3.is_false, z3.is_true) if k == z3.Z3_OP_AND else (z3.is_true, z3.is_false)
        kids = [_prune(c) for c in e.children()]
        if any(stop(c) for c in kids):
            return z3.BoolVal(k == z3.Z3_OP_OR)
        kids = [c for c in kids if not unit(c)]
        if not kids:
            return z3.BoolVal(k == z3.Z3_OP_AND)
        return kids[0] if len(kids) == 1 else e.decl()(*kids)
    if k == z3.Z3_OP_NOT:
        c = _prune(e.arg(0))
        if z3.is_true(c) or z3.is_false(c):
            return z3.BoolVal(z3.is_false(c))
        return z3.Not(c)
    return e.decl()(*[_prune(c) for c in e.children()])


def _under(term: z3.ExprRef, ctx: list) -> z3.ExprRef:
    """``term`` with every ``If`` whose condition ``ctx`` decides replaced by
    its branch, and integer constants of sums folded (the values a guard
    leaves)."""
    def go(e):
        if z3.is_app(e) and e.decl().kind() == z3.Z3_OP_ITE:
            c = go(e.arg(0))
            if _valid(ctx, c):
                return go(e.arg(1))
            if _valid(ctx, z3.Not(c)):
                return go(e.arg(2))
            return z3.If(c, go(e.arg(1)), go(e.arg(2)))
        if z3.is_app(e) and e.num_args() > 0 and not z3.is_const(e):
            return _fold(e.decl()(*[go(c) for c in e.children()]))
        return e
    return go(term)


def _enabled(t: lc.TransitionDef, y: Symbols) -> z3.BoolRef:
    """The guard of ``t`` with its fixed step size (as ``transition()`` sees it)."""
    g = t.guard(y.s, y.pre, y.sched, y.budget)
    if t.sched is None:
        return g
    fixed = y.sched == t.sched
    if z3.is_true(g):
        return fixed
    return z3.And(*(g.children() if z3.is_and(g) else [g]), fixed)


def _residue(e: z3.BoolRef, ctx: list) -> list[z3.BoolRef]:
    """The conjuncts of ``e`` that ``ctx`` does not already imply."""
    return [x for x in (e.children() if z3.is_and(e) else [e]) if not _valid(ctx, x)]


# ---------------------------------------------------------------------------
# the diagram
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Edge:
    name: str
    sources: tuple[str, ...]
    targets: tuple[str, ...]
    label: str


def edges(transitions: Iterable[lc.TransitionDef] | None = None) -> list[Edge]:
    """One :class:`Edge` per table entry, sources and targets found by Z3."""
    y = Symbols.make()
    out = []
    for t in (lc.TRANSITIONS if transitions is None else transitions):
        guard = _enabled(t, y)
        base = y.assumptions() + [guard]
        srcs = tuple(name for name, _, ph in PHASES if _possible(*base, ph(y.s, y.pre.f)))
        if t.ends:
            tgts: tuple[str, ...] = (t.status,)
            update = f"ends, {t.status}"
        else:
            new_f = t.new_f(y.s, y.pre, y.sched)
            tgts = tuple(
                name for name, _, ph in PHASES
                if any(_possible(*base, src(y.s, y.pre.f), ph(y.s, new_f))
                       for n2, _, src in PHASES if n2 in srcs)
            )
            update = f"f' = {show(_fold(new_f))}"
        label = "<br>".join([f"{t.name} [{show(guard)}]", update, t.vllm_function])
        out.append(Edge(t.name, srcs, tgts, label))
    return out


def _store_note(transitions: Sequence[lc.TransitionDef]) -> list[str]:
    """The store step after every transition, from the table and the rules."""
    y = Symbols.make()
    lines = ["store step after every transition (OffloadingConnectorScheduler._build_store_jobs)"]
    for t in transitions:
        if not t.stores:
            lines.append(f"{t.name}: no store step; cursor' = {show(t.new_cursor(y.s, y.pre, y.sched))}")
            continue
        ctx = y.assumptions() + [_enabled(t, y)]
        per_rule = {r: show(_under(t.tokens_after(y.s, r, y.pre, y.sched), ctx)) for r in RULES}
        toks = (next(iter(per_rule.values())) if len(set(per_rule.values())) == 1
                else ", ".join(f"{r}: {v}" for r, v in per_rule.items()))
        nt = show(_under(lc.step_num_tokens(t, y.s, y.pre, y.sched), ctx))
        lines.append(f"{t.name}: tokens = {toks}, num_tokens = {nt}")
    lines.append("n = storable_chunks(offloadable(tokens, num_tokens)) in chunks")
    cursor, n, c = z3.Int("cursor"), z3.Int("n"), z3.Int("c")
    known = {cursor.get_id(), n.get_id(), c.get_id()}
    for rule, fn in RULES.items():
        for ends in (False, True):
            st = fn(y.s, cursor, n, z3.BoolVal(ends), c, {"wc": z3.Int("wc")})
            conj = st.submitted.children() if z3.is_and(st.submitted) else [st.submitted]
            conj = [e for e in map(_prune, conj) if not z3.is_true(e)]
            plain = [e for e in conj if {x.get_id() for x in free_consts(e)} <= known]
            more = len(conj) - len(plain)
            window = " ∧ ".join(_chain(plain)) or "true"
            extra = f" ∧ {more} further condition(s) of {fn.__name__}" if more else ""
            when = "ended" if ends else "running"
            lines.append(f"{rule} {when}: submits c with {window}{extra}")
        nxt = fn(y.s, cursor, n, z3.BoolVal(False), c, {"wc": z3.Int("wc")}).next_cursor
        lines.append(f"{rule}: cursor' = {show(nxt)}")
    return lines


def render(transitions: Sequence[lc.TransitionDef] | None = None) -> str:
    """The Mermaid ``stateDiagram-v2`` text (no fence)."""
    transitions = lc.TRANSITIONS if transitions is None else tuple(transitions)
    y = Symbols.make()
    out = ["stateDiagram-v2"]
    for name, desc, ph in PHASES:
        out.append(f'    state "{name}<br>{desc}<br>{show(ph(y.s, y.pre.f))}" as {name}')
    ends = []
    for t in transitions:
        if t.ends and t.status not in ends:
            ends.append(t.status)
    for e in ends:
        out.append(f"    state \"{e}\" as {e}")
    init = lc.init(y.pre)
    starts = [name for name, _, ph in PHASES if _possible(*y.assumptions(), init, ph(y.s, y.pre.f))]
    for name in starts:
        out.append(f"    [*] --> {name} : init [{show(init)}]")
    for e in edges(transitions):
        if not e.sources or not e.targets:  # a dead entry: no edge, visibly
            out.append(f"    %% {e.name}: enabled in no phase")
            continue
        src, tgt = e.sources[0], e.targets[0]
        if len(e.sources) > 1:
            src = f"{e.name.replace('-', '_')}_from"  # a Mermaid state id
            out.append(f"    state {src} <<choice>>")
            out += [f"    {s} --> {src}" for s in e.sources]
        if len(e.targets) > 1:
            tgt = f"{e.name.replace('-', '_')}_to"
            out.append(f"    state {tgt} <<choice>>")
        out.append(f"    {src} --> {tgt} : {e.label}")
        if len(e.targets) > 1:
            t = next(t for t in transitions if t.name == e.name)
            new_f = t.new_f(y.s, y.pre, y.sched)
            ctx = y.assumptions() + [_enabled(t, y), z3.Or(
                [ph(y.s, y.pre.f) for name, _, ph in PHASES if name in e.sources])]
            f_post = z3.Int("f'")
            for name, _, ph in PHASES:
                if name in e.targets:
                    cond = [z3.substitute(x, (new_f, f_post))
                            for x in _residue(ph(y.s, new_f), ctx)]
                    out.append(f"    {tgt} --> {name} : {' ∧ '.join(_chain(cond)) or 'else'}")
    for e in ends:
        out.append(f"    {e} --> [*]")
    out.append(f"    note right of {PHASES[-1][0]}")
    out += [f"        {line}" for line in _store_note(transitions)]
    out.append("    end note")
    return "\n".join(out) + "\n"


def table(transitions: Sequence[lc.TransitionDef] | None = None) -> str:
    """The table ``TRANSITIONS`` as Markdown (the same terms as the diagram)."""
    transitions = lc.TRANSITIONS if transitions is None else tuple(transitions)
    y = Symbols.make()
    rows = [
        "| kind | vLLM function | guard | f' | num_tokens_after_batch | num_tokens | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in transitions:
        guard = _enabled(t, y)
        ctx = y.assumptions() + [guard]
        toks = {r: show(_under(t.tokens_after(y.s, r, y.pre, y.sched), ctx)) for r in RULES}
        tok = (next(iter(toks.values())) if len(set(toks.values())) == 1
               else "<br>".join(f"{r}: {v}" for r, v in toks.items()))
        if not t.stores:
            tok = "—"
        nf = "(ends)" if t.ends else show(_fold(t.new_f(y.s, y.pre, y.sched)))
        cells = [
            f"`{t.name}`", f"`{t.vllm_module}.{t.vllm_function}`", show(guard), nf, tok,
            show(_under(lc.step_num_tokens(t, y.s, y.pre, y.sched), ctx)) if t.stores
            else f"(no store; cursor' = {show(t.new_cursor(y.s, y.pre, y.sched))})", f"`{t.status}`",
        ]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def block(transitions: Sequence[lc.TransitionDef] | None = None) -> str:
    """The generated Markdown block, markers included: the diagram, then the
    table it is drawn from."""
    return (f"{BEGIN}\n```mermaid\n{render(transitions)}```\n\n"
            f"{table(transitions)}{END}")


def extract(doc: str) -> str | None:
    """The generated block of ``doc`` (markers included), or None."""
    i, j = doc.find(BEGIN), doc.find(END)
    if i < 0 or j < i:
        return None
    return doc[i:j + len(END)]


def replace(doc: str, new_block: str) -> str:
    old = extract(doc)
    if old is None:
        raise ValueError(f"no {BEGIN} ... {END} block in the document")
    return doc.replace(old, new_block, 1)


def regenerate(doc: str) -> str | None:
    """``doc`` with its generated block replaced by :func:`block`, or None
    when the block already is :func:`block` (``kvreach diagram --check``
    fails then); ``ValueError`` when ``doc`` has no block."""
    current = extract(doc)
    if current is None:
        raise ValueError(f"no {BEGIN} ... {END} block in the document")
    new = block()
    return None if current == new else replace(doc, new)
