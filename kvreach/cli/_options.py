"""The scenario options, one definition shared by ``simulate`` and ``plot``
(:data:`SCENARIO_OPTIONS`, :func:`scenario_command`), and running the
scenario with its errors named by flag."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvreach.cli._common import CliError, from_param_error
from kvreach.model_config import DerivedModel, ModelConfigError, derive, load
from kvreach.models import PRESETS
from kvreach.params import LOAD_MODELS, MAX_CHUNKS, MAX_STEPS, MAX_TOKENS, ParamError
from kvreach.scenario import Scenario, run_scenario

if TYPE_CHECKING:
    from kvreach.impl.lifecycle import Trace


_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class _Opt:
    """One scenario option: Scenario field, flag(s), type, default, help."""

    name: str
    flag: str
    type: object
    default: object = _REQUIRED
    help: str | None = None

    def parameter(self) -> inspect.Parameter:
        ann = Annotated[self.type, typer.Option(self.flag, help=self.help)]  # type: ignore[valid-type]
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY,
                                 annotation=ann, default=self.default)


# The scenario options, in --help order.
SCENARIO_OPTIONS: list[_Opt] = [
    _Opt("swa_block_size", "--swa-block-size", Optional[int], None,
         "SWA block_size (tokens; or --model)"),
    _Opt("window", "--window", Optional[int], None, "sliding window W (tokens; or --model)"),
    _Opt("prompt", "--prompt", int, help=f"prompt tokens (at most {MAX_TOKENS:,}, and at most "
         f"{MAX_CHUNKS:,} SWA chunks)"),
    _Opt("budget", "--budget", int, help="per-step token budget (max_num_batched_tokens; at "
         f"most {MAX_STEPS:,} scheduler steps in all)"),
    _Opt("full_block_size", "--full-block-size", Optional[int], None,
         "full-attention block_size; alignment = it * dcp * blocks_per_chunk "
         "(omit: SWA-only, alignment = the SWA chunk)"),
    _Opt("blocks_per_chunk", "--blocks-per-chunk", int, 1,
         "SWA blocks per offload chunk (SchedulerOffloadConfig.blocks_per_chunk)"),
    _Opt("dcp", "--dcp", int, 1, "decode context parallel world size"),
    _Opt("eagle", "--eagle", bool, False, "EAGLE/MTP draft group"),
    _Opt("retention_interval", "--retention-interval", Optional[int], None,
         "CacheConfig.prefix_cache_retention_interval (tokens, a multiple of the SWA chunk; "
         "needs --full-block-size)"),
    _Opt("max_offload_tokens", "--max-offload-tokens", Optional[int], None,
         "the request's kv_transfer_params max_offload_tokens (omit: no cap)"),
    _Opt("offload_prompt_only", "--offload-prompt-only/--no-offload-prompt-only", bool, True,
         "OffloadingSpec.offload_prompt_only: store prompt tokens only"),
    _Opt("abort_after_step", "--abort-after-step", Optional[int], None,
         "abort once K steps are scheduled"),
    _Opt("async_scheduling", "--async", bool, False, "async scheduling"),
    _Opt("error_after_step", "--error-after-step", Optional[int], None,
         "finish with FINISHED_ERROR once K steps are scheduled (also before the prompt is "
         "computed; not with --abort-after-step or --async)"),
    _Opt("decode", "--decode", int, 0, "decode steps after the prompt (prompt + decode at most "
         f"{MAX_TOKENS:,} tokens)"),
    _Opt("load_model", "--load-model", str, "intended", "one of " + ", ".join(LOAD_MODELS)),
    _Opt("extra_retained_tokens", "--extra-retained-tokens", int, 0,
         "SlidingWindowSpec.extra_retained_tokens (MTP re-prefill history)"),
    _Opt("hash_lookahead_tokens", "--hash-lookahead-tokens", Optional[int], None,
         "vllm_config.num_hash_lookahead_tokens L (lookahead block hashes, vLLM 0.34.0 on; "
         "0 is disable_lookahead_block_hashes). Default: what vLLM derives under the "
         "offloading connector: extra-retained-tokens + 1 with an EAGLE/MTP drafter "
         "(--eagle, or --extra-retained-tokens > 0), else 0; 0 for releases before 0.34.0"),
]


MODEL_OPTION = _Opt("model", "--model", Optional[str], None,
                    "a real model's groups instead of --full-block-size, --swa-block-size and "
                    "--window (and --eagle for an MTP group): one of " + ", ".join(PRESETS))
MODEL_CONFIG_OPTIONS = [
    _Opt("model_config", "--model-config", Optional[str], None,
         "a local Hugging Face config.json: the groups vLLM 0.34.0 derives for it (block "
         "sizes, window, EAGLE/MTP, extra_retained_tokens) instead of --full-block-size, "
         "--swa-block-size and --window"),
    _Opt("block_size", "--block-size", Optional[int], None,
         "with --model-config: CacheConfig.block_size (vLLM's --block-size; default 16)"),
    _Opt("tp", "--tp", Optional[int], None,
         "with --model-config: tensor parallel size (KV heads per rank; default 1)"),
    _Opt("mtp", "--mtp", Optional[int], None,
         "with --model-config: serve with the config's MTP layer as the draft "
         "(speculative method mtp) and N speculative tokens"),
]
GEOMETRY = {"full_block_size": "--full-block-size", "swa_block_size": "--swa-block-size",
            "window": "--window"}


def _with_model(model: str | None, fields: dict) -> dict:
    """The scenario's fields with ``--model``'s groups filled in; one line
    for an unknown model, a model given with the geometry it sets, or
    neither given."""
    if model is None:
        for name in ("swa_block_size", "window"):
            if fields[name] is None:
                raise CliError(GEOMETRY[name], "(missing)",
                               "an integer >= 1, or --model NAME (one of "
                               + ", ".join(PRESETS) + "), or --model-config PATH")
        return fields
    preset = PRESETS.get(model)
    if preset is None:
        raise CliError("--model", model, "one of " + ", ".join(PRESETS))
    given = [GEOMETRY[n] for n in GEOMETRY if fields[n] is not None]
    if given:
        raise CliError("--model", model, "no " + ", ".join(given) + " beside it (the model "
                       f"sets them: --full-block-size {preset.full_block_size} --swa-block-size "
                       f"{preset.swa_block_size} --window {preset.window})")
    return fields | {
        "full_block_size": preset.full_block_size, "swa_block_size": preset.swa_block_size,
        "window": preset.window, "eagle": fields["eagle"] or preset.eagle,
        "extra_retained_tokens": fields["extra_retained_tokens"] or preset.extra_retained_tokens,
    }


def _derived_line(path: str, d: DerivedModel) -> str:
    """The derivation in one line: each kind of group's block, window, count,
    layers and bytes."""
    kinds: dict[tuple, list] = {}
    for g in d.groups:
        kinds.setdefault((g.kind, g.window, g.block_size, g.page_bytes, g.eagle), []).append(g)
    parts = []
    for (_, window, block, page, eagle), gs in kinds.items():
        name = "full" if window is None else f"SWA W {window}"
        count = f" x{len(gs)} groups" if len(gs) > 1 else ""
        size = "" if page is None else f", {page:,} bytes/block/layer"
        parts.append(f"{name} block {block}{count} ({sum(g.layers for g in gs)} layers{size}"
                     + (", EAGLE" if eagle else "") + ")")
    return (f"model-config {path} ({d.model_type}, as vLLM 0.34.0 groups it): "
            + "; ".join(parts) + f"; extra_retained_tokens {d.extra_retained_tokens}")


def _with_model_config(opts: dict, model: str | None, fields: dict) -> dict:
    """The scenario's fields with ``--model-config``'s derived groups filled
    in (the derivation printed on stderr); one line for a bad config, a
    config beside --model or the geometry it sets, or a config-only option
    without it."""
    path = opts["model_config"]
    if path is None:
        for o in MODEL_CONFIG_OPTIONS[1:]:
            if opts[o.name] is not None:
                raise CliError(o.flag, opts[o.name], "--model-config PATH beside it")
        return _with_model(model, fields)
    if model is not None:
        raise CliError("--model-config", path, f"no --model beside it (--model {model})")
    given = [GEOMETRY[n] for n in GEOMETRY if fields[n] is not None]
    if fields["eagle"]:
        given.append("--eagle")
    if fields["extra_retained_tokens"]:
        given.append("--extra-retained-tokens")
    if given:
        raise CliError("--model-config", path, "no " + ", ".join(given) + " beside it (the "
                       "config sets them; --mtp N for its MTP draft)")
    for o in MODEL_CONFIG_OPTIONS[1:]:
        if opts[o.name] is not None and opts[o.name] < (0 if o.name == "mtp" else 1):
            raise CliError(o.flag, opts[o.name],
                           "an integer >= " + ("0" if o.name == "mtp" else "1"))
    try:
        d = derive(load(path), block_size=opts["block_size"] or 16, tp=opts["tp"] or 1,
                   mtp=opts["mtp"] or 0)
    except ModelConfigError as e:
        # a config field is named with its file: "--model-config X: field=value"
        flag = e.field if e.field == "--model-config" else f"--model-config {path}: {e.field}"
        raise CliError(flag, e.value, e.expected) from None
    typer.echo(_derived_line(path, d), err=True)
    return fields | {
        "full_block_size": d.full_block_size, "swa_block_size": d.swa_block_size,
        "window": d.window, "eagle": d.eagle, "extra_retained_tokens": d.extra_retained_tokens,
    }


def scenario_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Give command ``fn`` the scenario options of :data:`SCENARIO_OPTIONS`
    after its own; ``fn`` receives them as one ``scenario: Scenario``."""
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name])
        for p in inspect.signature(fn).parameters.values() if p.name != "scenario"
    ]
    # a scenario option ``fn`` declares itself (to tell "given" from "left
    # out": default None) is ``fn``'s; the scenario gets its default when None
    mine = {p.name for p in own}
    shared = ([MODEL_OPTION.parameter()] + [o.parameter() for o in MODEL_CONFIG_OPTIONS]
              + [o.parameter() for o in SCENARIO_OPTIONS if o.name not in mine])

    def value(o: _Opt, kw: dict) -> object:
        if o.name not in mine:
            return kw.pop(o.name)
        v = kw[o.name]
        return o.default if v is None else v

    @functools.wraps(fn)
    def command(**kw: object) -> None:
        model = kw.pop(MODEL_OPTION.name)
        opts = {o.name: kw.pop(o.name) for o in MODEL_CONFIG_OPTIONS}
        fields = _with_model_config(opts, model,
                                    {o.name: value(o, kw) for o in SCENARIO_OPTIONS})
        return fn(scenario=Scenario(**fields), **kw)

    # fn's positional parameters first (e.g. --rule), then the scenario, then
    # fn's keyword-only ones (e.g. --json)
    first = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    params = ([p for p in own if p.name in first] + shared
              + [p for p in own if p.name not in first])
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def run_scenario_or_error(rule, s: Scenario, release=None) -> Trace:
    """Run ``s`` through the rule (or a release's store side), its ParamErrors
    as one-line errors naming the flag; ``release``: the release whose
    lookahead hashes a rule runs with (``run_scenario``)."""
    try:
        return run_scenario(rule, s, release)
    except ParamError as e:
        raise from_param_error(e) from None


def scenario_flags(s: Scenario, rules: list[str]) -> str:
    """The scenario as the options that reproduce it (defaults left out)."""
    parts = [f"--rule {rules[0]}" if len(rules) == 1 else "--compare " + " ".join(rules)]
    for o in SCENARIO_OPTIONS:
        v = getattr(s, o.name)
        if v == o.default:
            continue
        flags = o.flag.split("/")
        if isinstance(v, bool):
            parts.append(flags[0] if v else flags[-1])
        else:
            parts.append(f"{flags[0]} {v}")
    return " ".join(parts)
