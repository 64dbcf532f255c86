"""A run directory read back for people: its trajectories selected and grouped (``unirl show``), and one
self-contained HTML page of a run or a sweep (``unirl report``).

Everything a model generated, a reward raised or a user named is untrusted text. :func:`visible` turns control
characters (ANSI escapes, carriage returns, bidirectional overrides) into printable escapes before a terminal sees
them; the page HTML-escapes every such string as well (:func:`esc`), and its Content-Security-Policy lets nothing
load from the network and no script run but the page's own (its hash is in the policy): an injected ``<script>``
would stay inert even if escaping were ever missed.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.record.layout import EVAL, MANIFEST, METRICS, PARITY, PLAN, SUMMARY, read_jsonl
from unirl.record.trajectory_log import COMPRESSED, PLAIN, existing

RUN_FILES = (MANIFEST, SUMMARY, METRICS, PLAN, PLAIN, COMPRESSED)
"""Any one of these makes a directory a run directory (a run killed early may have only some)."""

# --- untrusted text -------------------------------------------------------------------------------------------

_KEEP = {"\n", "\t"}
_NAMED = {"\r": "\\r", "\x1b": "\\x1b", "\x07": "\\a", "\x08": "\\b", "\x0b": "\\v", "\x0c": "\\f", "\x00": "\\0"}


def visible(text: Any) -> str:
    """``text`` with every control or format character written as an escape (``\\x1b``, ``\\u202e``), newlines
    and tabs kept: what a completion holds, shown without letting it move the cursor, recolour the terminal,
    retitle the window or reverse the text around it."""
    value = text if isinstance(text, str) else str(text)
    if value.isprintable() and "\x1b" not in value:  # the common case, checked in C
        return value
    out = []
    for char in value:
        if char in _KEEP:
            out.append(char)
        elif char in _NAMED:
            out.append(_NAMED[char])
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp", "Cs"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def esc(text: Any) -> str:
    """Untrusted text for HTML: :func:`visible`, then every ``<``, ``>``, ``&`` and quote escaped."""
    return html.escape(visible(text), quote=True)


# --- a run directory ------------------------------------------------------------------------------------------


def hydra_members(path: Path) -> list[Path]:
    """Sub-directories with ``.hydra/``: what a multirun directory holds (numbered members)."""
    found = [p for p in path.iterdir() if (p / ".hydra").is_dir()] if path.is_dir() else []
    return sorted(found, key=lambda p: (len(p.name), p.name))


def check_run_dir(path: Path, verb: str) -> Path:
    """``path`` if it is a run directory, else a :class:`UnirlError` saying what it is instead."""
    if not path.exists():
        raise UnirlError(f"{path}: no such directory (a run directory, as `unirl` prints at the end of a run)")
    if not path.is_dir():
        raise UnirlError(f"{path}: a file, not a run directory")
    if any((path / name).exists() for name in RUN_FILES):
        return path
    members = hydra_members(path)
    if members:
        shown = ", ".join(str(m) for m in members[:4]) + (", ..." if len(members) > 4 else "")
        raise UnirlError(f"{path} is a multirun directory, not one run; `unirl {verb}` one of its members: {shown}")
    raise UnirlError(f"{path}: not a run directory (it has none of {', '.join(RUN_FILES)})")


def read_json(path: Path) -> dict[str, Any]:
    """A run's JSON file, {} when absent or unreadable (a run killed while writing it)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def trajectories(run_dir: Path) -> list[dict[str, Any]]:
    """Every scored completion the run kept (plain or gzip; a torn last line skipped)."""
    path = existing(run_dir)
    return read_jsonl(path) if path is not None else []


def step_of(record: dict[str, Any]) -> int | None:
    step = record.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def steps_text(steps: Iterable[int]) -> str:
    """``1-20``, ``1, 10, 20``, ``1-3, 7``: the recorded steps, runs of consecutive steps as ranges."""
    ordered = sorted(set(steps))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if j == i else f"{ordered[i]}-{ordered[j]}" if j > i + 1
                     else f"{ordered[i]}, {ordered[j]}")
        i = j + 1
    return ", ".join(parts)


def failed(record: dict[str, Any]) -> bool:
    """The completion's reward call failed for at least one reward (its ``errors`` name them)."""
    return bool(mapping(record, "errors"))


def total_of(record: dict[str, Any]) -> float:
    """The record's total for sorting: a failed or missing total sorts as the worst."""
    total = record.get("total")
    if isinstance(total, int | float) and not isinstance(total, bool) and not math.isnan(total):
        return float(total)
    return -math.inf


@dataclass(frozen=True)
class Selection:
    """What ``unirl show`` picks: one step or all, an order, only failures, a prompt substring, how many."""

    step: int | None = None
    order: str = "recorded"
    """``recorded``, ``worst`` (lowest total first) or ``best``."""
    errors_only: bool = False
    prompt: str | None = None
    limit: int | None = None


def select(records: Sequence[dict[str, Any]], selection: Selection) -> list[dict[str, Any]]:
    """The records ``selection`` asks for, in its order, at most ``limit``."""
    chosen = [r for r in records
              if (selection.step is None or step_of(r) == selection.step)
              and (not selection.errors_only or failed(r))
              and (selection.prompt is None or selection.prompt.casefold() in str(r.get("prompt", "")).casefold())]
    if selection.order in ("worst", "best"):
        chosen = sorted(chosen, key=total_of, reverse=selection.order == "best")  # stable: ties keep their order
    return chosen[:selection.limit] if selection.limit is not None else chosen


def prompt_text(record: dict[str, Any]) -> str:
    """A record's prompt as one string (chat prompts are lists of messages)."""
    prompt = record.get("prompt", "")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role', '?')}: {m.get('content', '')}" if isinstance(m, dict) else str(m)
                         for m in prompt)
    return json.dumps(prompt, ensure_ascii=False, default=str)


def completion_text(record: dict[str, Any]) -> str:
    """What the model wrote: the completion, or an environment episode turn by turn (each assistant turn, the
    observation it got, the turn's reward; then how it ended and its return)."""
    episode = record.get("episode")
    if isinstance(episode, dict) and isinstance(episode.get("turns"), list):
        return episode_text(episode)
    completion = record.get("completion", "")
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):  # chat completions: the messages' contents
        return "\n".join(str(m.get("content", "")) if isinstance(m, dict) else str(m) for m in completion)
    return json.dumps(completion, ensure_ascii=False, default=str)


def episode_text(episode: dict[str, Any]) -> str:
    lines = []
    for n, turn in enumerate(t for t in episode["turns"] if isinstance(t, dict)):
        cut = " (truncated)" if turn.get("truncated") else ""
        lines.append(f"{n + 1}. {turn.get('action', '')}{cut}   reward {turn.get('reward', 0):g}")
        observation = turn.get("observation")
        messages = [{"role": "user", "content": observation}] if isinstance(observation, str) else observation or []
        for message in messages if isinstance(messages, list) else []:
            if isinstance(message, dict):
                lines.append(f"   [{message.get('role', '?')}] {message.get('content', '')}")
    ended = f"{episode.get('termination', '?')}, return {episode.get('return', 0):g}"
    if episode.get("error"):
        ended += f": {episode.get('error_kind')} {episode['error']}"
    return "\n".join([*lines, ended])


def group_by_prompt(records: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(prompt, its records) in the order each prompt first appears in ``records`` (so the worst group leads when
    ``records`` are sorted worst first)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(prompt_text(record), []).append(record)
    return list(groups.items())


def score_names(records: Iterable[dict[str, Any]], field: str) -> list[str]:
    """Every key of ``field`` (``scores`` or ``components``) across ``records``, in first-seen order."""
    names: dict[str, None] = {}
    for record in records:
        value = record.get(field)
        if isinstance(value, dict):
            for name in value:
                names.setdefault(str(name), None)
    return list(names)


def mapping(record: dict[str, Any], field: str) -> dict[str, Any]:
    """``record[field]`` when it is an object (scores, components, errors), else {}."""
    value = record.get(field)
    return value if isinstance(value, dict) else {}


def error_lines(record: dict[str, Any]) -> str:
    """One line per failed reward: its name, the failure's kind and the last line of its message (the exception)."""
    kinds = mapping(record, "error_kinds")
    return "\n".join(f"{name} ({kinds.get(name, '?')}): {(str(message).strip().splitlines() or [''])[-1]}"
                     for name, message in mapping(record, "errors").items())


def number(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    if math.isnan(value):
        return "nan"
    return f"{value:.{digits}f}"


# --- the HTML page ---------------------------------------------------------------------------------------------

SCRIPT = """window.addEventListener("load", function () {
  document.querySelectorAll("img[data-check]").forEach(function (img) {
    var ok = img.complete && img.naturalWidth > 0;
    img.setAttribute("data-natural-width", String(img.naturalWidth));
    if (!ok) { var note = document.createElement("p"); note.className = "missing";
      note.textContent = "this picture could not be decoded"; img.after(note); }
  });
  document.body.setAttribute("data-ready", "yes");
});"""
"""The page's one script: marks each picture with its decoded width (0 if it failed), names a failure."""

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1280px; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
h3 { font-size: 1em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; margin: .4em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre, td.text { font: 12px/1.35 ui-monospace, monospace; white-space: pre-wrap; word-break: break-word; }
td.text { max-width: 48em; } tr.failed td { background: #fff1f0; } .error { color: #a8071a; }
img.curves { max-width: 100%; height: auto; border: 1px solid #eee; }
.missing, .note { color: #777; } .state-completed { color: #237804; } .state-failed { color: #a8071a; }
.verdict-equal { color: #237804; } .verdict-design { color: #ad6800; } .verdict-mismatch { color: #a8071a; }
details > summary { cursor: pointer; color: #444; }
"""


def csp() -> str:
    """Nothing from the network or any other origin; inline styles; pictures only as data: URIs; one script: ours."""
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    return (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'; "
            "base-uri 'none'; form-action 'none'")


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{csp()}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{esc(title)}</title>\n<style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n<script>{SCRIPT}</script>\n</body></html>\n")


def image(png: bytes | None, alt: str, css: str = "curves") -> str:
    if not png:
        return f'<p class="missing">{esc(alt)}: no picture (matplotlib is not installed, or nothing was logged)</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="{css}" data-check alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def key_values(data: dict[str, Any], css_id: str) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(_plain(v))}</td></tr>" for k, v in sorted(data.items()))
    return f'<table id="{css_id}">{rows}</table>'


def json_block(label: str, data: Any, css_id: str) -> str:
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return f'<details id="{css_id}"><summary>{esc(label)}</summary><pre>{esc(text)}</pre></details>'


def trajectory_table(records: Sequence[dict[str, Any]], css_class: str = "trajectories") -> str:
    """One row per completion: prompt, completion, total, every reward, every component, the errors."""
    scores = score_names(records, "scores")
    components = score_names(records, "components")
    head = "".join(f"<th>{esc(h)}</th>" for h in ["step", "prompt", "completion", "total", *scores, *components,
                                                   "errors"])
    rows = []
    for r in records:
        errors = mapping(r, "errors")
        error_text = error_lines(r)
        cells = [f'<td class="num">{esc(number(step_of(r), 0))}</td>',
                 f'<td class="text">{esc(prompt_text(r))}</td>',
                 f'<td class="text">{esc(completion_text(r))}</td>',
                 f'<td class="num">{esc(number(r.get("total")))}</td>',
                 *(f'<td class="num">{esc(number(mapping(r, "scores").get(n)))}</td>' for n in scores),
                 *(f'<td class="num">{esc(number(mapping(r, "components").get(n)))}</td>' for n in components),
                 f'<td class="text error">{esc(error_text)}</td>']
        rows.append(f'<tr class="{"failed" if errors else "ok"}">{"".join(cells)}</tr>')
    return f'<table class="{css_class}"><tr>{head}</tr>{"".join(rows)}</table>'


def sample_trajectories(records: Sequence[dict[str, Any]], groups: int = 4,
                        per_group: int = 8) -> list[tuple[str, list[dict[str, Any]]]]:
    """(heading, records) for the page: a few prompt groups of the first and last recorded steps, and failures."""
    steps = sorted({s for s in map(step_of, records) if s is not None})
    picked: list[tuple[str, list[dict[str, Any]]]] = []
    for step in dict.fromkeys([*steps[:1], *steps[-1:]]):
        chosen = [r for r in records if step_of(r) == step]
        kept = [r for _, group in group_by_prompt(chosen)[:groups] for r in group[:per_group]]
        picked.append((f"step {step}: {min(groups, len(group_by_prompt(chosen)))} of "
                       f"{len(group_by_prompt(chosen))} prompts, {len(kept)} of {len(chosen)} completions", kept))
    if not steps and records:
        picked.append((f"{min(len(records), groups * per_group)} of {len(records)} completions (no step recorded)",
                       list(records[:groups * per_group])))
    failures = [r for r in records if failed(r)]
    if failures:
        picked.append((f"failed reward calls: {min(len(failures), 20)} of {len(failures)}", failures[:20]))
    return picked


def run_report(run_dir: Path, curves: bytes | None) -> str:
    """The page of one run: its summary, the curves, held-out accuracy, sampled trajectories, manifest and plan."""
    summary = read_json(run_dir / SUMMARY)
    manifest = read_json(run_dir / MANIFEST)
    plan = read_json(run_dir / PLAN)
    records = trajectories(run_dir)
    evals = [e for e in read_jsonl(run_dir / EVAL) if e.get("kind", "summary") == "summary" and "accuracy" in e]
    metrics = read_jsonl(run_dir / METRICS)
    framework = summary.get("framework") or manifest.get("framework") or plan.get("framework") or "?"
    state = summary.get("state", "no summary: running, or killed before it ended")
    parts = [f"<h1>{esc(run_dir.name)} <small>({esc(framework)}, "
             f'<span id="state" class="state-{esc(state)}">{esc(state)}</span>)</small></h1>',
             f'<p class="note">run directory: <code>{esc(run_dir.resolve())}</code>; '
             f"{len(metrics)} logged steps, {len(records)} recorded completions</p>",
             "<h2>Curves</h2>", image(curves, "training curves"),
             "<h2>Summary</h2>", key_values(summary, "summary") if summary else
             '<p class="missing">no summary.json</p>']
    if evals:
        rows = "".join(f'<tr><td class="num">{esc(number(e.get("step"), 0))}</td>'
                       f'<td class="num">{esc(number(e.get("accuracy")))}</td>'
                       f'<td class="num">{esc(number(e.get("solved"), 0))} / {esc(number(e.get("n"), 0))}</td>'
                       f'<td class="num">{esc(number(e.get("reward_mean")))}</td></tr>' for e in evals)
        parts += ["<h2>Held-out evaluation</h2>",
                  f'<table id="evals"><tr><th>step</th><th>accuracy</th><th>solved</th><th>mean reward</th></tr>'
                  f"{rows}</table>"]
    parts += parity_section(read_json(run_dir / PARITY))
    parts.append("<h2>Trajectories</h2>")
    if not records:
        parts.append('<p class="missing">no trajectories recorded (logging.trajectories=false, or none yet)</p>')
    for heading, chosen in sample_trajectories(records):
        parts += [f"<h3>{esc(heading)}</h3>", trajectory_table(chosen)]
    parts += ["<h2>Manifest and plan</h2>", json_block("manifest.json", manifest, "manifest"),
              json_block("plan.json", plan, "plan")]
    return page(f"unirl report: {run_dir.name}", "\n".join(parts))


def parity_section(parity: dict[str, Any]) -> list[str]:
    """The run's parity certificate (parity.json): each quantity's verdict against the recipe's meaning."""
    if not parity:
        return []
    head = ["<h2>Parity certificate</h2>"]
    if "error" in parity:
        return [*head, f'<p class="missing">no certificate: {esc(parity["error"])}</p>']
    rows = "".join(f'<tr><td>{esc(r["framework"])}</td><td>{esc(r["quantity"])}</td>'
                   f'<td class="num">{esc(number(r["max_rel_diff"], 8))}</td>'
                   f'<td class="verdict-{esc(r["verdict"])}">{esc(r["verdict"])}</td><td>{esc(r["reason"])}</td></tr>'
                   for r in parity.get("rows", []))
    missing = "".join(f'<p class="note">not certified: {esc(item["framework"])}: {esc(item["why"])}</p>'
                      for item in parity.get("not_certified", []))
    return [*head, '<p class="note">the backend\'s own advantage and loss code on a frozen batch of this recipe, '
            "against the recipe's meaning (<code>unirl parity</code>)</p>",
            '<table id="parity"><tr><th>backend</th><th>quantity</th><th>max rel diff</th><th>verdict</th>'
            f"<th>why</th></tr>{rows}</table>", missing]


def multirun_report(sweep_dir: Path, rows: Sequence[dict[str, Any]], configurations: Sequence[dict[str, Any]],
                    smoothing: str, curves: bytes | None) -> str:
    """The page of a sweep: one table per configuration (its members side by side, seeds aggregated), the reward
    curves, and each member's error. ``rows`` and ``configurations`` as :mod:`unirl.launch.sweep` computes them."""
    by_member = {r["member"]: r for r in rows}
    parts = [f"<h1>{esc(sweep_dir.name)} <small>(sweep of {_count(len(rows), 'member')}, "
             f"{_count(len(configurations), 'configuration')})</small></h1>",
             f'<p class="note">multirun directory: <code>{esc(sweep_dir.resolve())}</code>; '
             f"final reward: {esc(smoothing)}</p>",
             "<h2>Reward curves</h2>", image(curves, "reward curves by configuration")]
    for index, config in enumerate(configurations):
        label = f"{config['framework']} {' '.join(config['differs'])}".strip()
        head = "".join(f"<th>{h}</th>" for h in ("member", "seed", "final reward", "held-out accuracy", "steps",
                                                 "wall s", "state"))
        body = []
        for name in config["members"]:
            r = by_member[name]
            body.append(f'<tr class="member"><td>{esc(name)}</td><td>{esc(r.get("seed"))}</td>'
                        f'<td class="num">{esc(number(r.get("final_reward")))}</td>'
                        f'<td class="num">{esc(number(r.get("accuracy")))}</td>'
                        f'<td class="num">{esc(r.get("steps"))}</td>'
                        f'<td class="num">{esc(number(r.get("wall_time_s"), 1))}</td>'
                        f'<td class="state-{esc(r.get("state"))}">{esc(r.get("state"))}</td></tr>')
        body.append(f'<tr class="aggregate"><th colspan="2">mean ± sd (completed)</th>'
                    f'<td class="num">{esc(_spread(config["final_reward"]))}</td>'
                    f'<td class="num">{esc(_spread(config["accuracy"]))}</td>'
                    f'<td class="num">{esc(_spread(config["steps"], 0))}</td><td></td>'
                    f'<td>{esc(", ".join(f"{k} {v}" for k, v in config["states"].items()))}</td></tr>')
        parts += [f"<h2>Configuration {index + 1}: {esc(label or 'every member')}</h2>",
                  f'<p class="note">overrides: <code>{esc(" ".join(config["configuration"]) or "none")}</code></p>',
                  f'<table class="configuration"><tr>{head}</tr>{"".join(body)}</table>']
    errors = [r for r in rows if r.get("state") != "completed"]
    if errors:
        items = "".join(f"<li>member {esc(r['member'])} {esc(r['state'])}: "
                        f"<span class=\"error\">{esc(r.get('error') or 'see ' + str(r['run_dir']))}</span></li>"
                        for r in errors)
        parts += ["<h2>Members that did not complete</h2>", f"<ul>{items}</ul>"]
    return page(f"unirl report: sweep {sweep_dir.name}", "\n".join(parts))


def _spread(stats: dict[str, Any], digits: int = 3) -> str:
    if not stats.get("n"):
        return "-"
    if stats.get("std") is None:
        return f"{number(stats['mean'], digits)} (n=1)"
    return f"{number(stats['mean'], digits)} ± {number(stats['std'], digits)} (n={stats['n']})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return number(value, 4)
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
