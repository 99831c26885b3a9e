"""Deterministic generator of synthetic SEC 10-K-style plain-text annual reports.

Each filing comes with a :class:`FilingTruth` holding the facts an extractor is
expected to recover (company, fiscal year, total revenue, risk factor titles).
Padding to reach a target size only ever adds neutral paragraphs to Item 1,
Item 7 and the notes in Item 8, so the truth is the same for every size.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pipeline_dev import synth_vocab as v

WIDTH = 100
_NAME_SPACE = len(v.ROOTS) * len(v.INDUSTRIES) * 3  # root x noun combinations per middle word
_STRIDE = 1333  # coprime with _NAME_SPACE, about N/phi; 60 consecutive indexes get 60 roots

_NUMBERS: dict[str, Callable[[random.Random], str]] = {
    "pct": lambda r: str(r.randint(2, 45)),
    "bps": lambda r: str(r.randint(10, 400)),
    "count": lambda r: str(r.randint(3, 60)),
    "count2": lambda r: str(r.randint(61, 120)),
    "years": lambda r: str(r.randint(6, 15)),
    "n_small": lambda r: str(r.randint(2, 5)),
    "rate": lambda r: f"{r.randint(30, 75) / 10:.1f}",
    "money": lambda r: f"${r.randint(15, 9999) / 10:,.1f} million",
}


@dataclass(frozen=True)
class FilingTruth:
    """Ground-truth facts embedded in one synthetic filing."""

    company: str
    fiscal_year: int
    revenue_usd: float
    risk_factor_titles: list[str]  # in Item 1A order, without the trailing period
    filename: str


class _Slots(dict[str, str]):
    """Template slot values: fixed per filing, otherwise drawn at random on each use."""

    def __init__(self, rng: random.Random, industry: Mapping[str, v.Pool], fixed: dict[str, str]):
        super().__init__(fixed)
        self.rng = rng
        self.industry = industry
        self.seen: set[str] = set()
        self.template = ""
        self.nth: dict[str, int] = {}
        # Numbers are fixed per (template, slot, occurrence) so restated facts agree.
        self.numbers: dict[tuple[str, str, int], str] = {}

    def __missing__(self, key: str) -> str:
        pool = self.industry.get(key) or v.GENERIC.get(key)
        if not pool:
            slot = (self.template, key, self.nth.get(key, 0))
            self.nth[key] = slot[2] + 1
            if slot not in self.numbers:
                self.numbers[slot] = _NUMBERS[key](self.rng)
            return self.numbers[slot]
        value = self.rng.choice(pool)
        for _ in range(4):  # avoid "X and X" within one sentence
            if value not in self.seen:
                break
            value = self.rng.choice(pool)
        self.seen.add(value)
        return value

    def fill(self, template: str) -> str:
        self.seen, self.template, self.nth = set(), template, {}
        return template.format_map(self)

    def sentence(self, template: str, lead_in: bool = False) -> str:
        """Fill ``template``, sometimes opening it with a connective for variety."""
        text = self.fill(template)
        plain = text.startswith(("We ", "Our ", "The ")) and " also " not in text
        if lead_in and plain and self.rng.random() < 0.3:
            text = f"{self.fill(self.rng.choice(v.CONNECTIVES))} {text[0].lower()}{text[1:]}"
        return text


def _wrap(text: str) -> str:
    """Greedy word wrap at WIDTH columns (much faster than textwrap for megabyte-sized output)."""
    text = " ".join(text.split())
    lines: list[str] = []
    pos = 0
    while len(text) - pos > WIDTH:
        cut = text.rfind(" ", pos, pos + WIDTH + 1)
        if cut <= pos:  # a word longer than the line: break after it
            cut = text.find(" ", pos + WIDTH)
            if cut == -1:
                break
        lines.append(text[pos:cut])
        pos = cut + 1
    lines.append(text[pos:])
    return "\n".join(lines)


def _paragraph(s: _Slots, pool: v.Pool, lo: int = 4, hi: int = 6, extra: v.Pool = ()) -> str:
    """A wrapped paragraph of distinct templates from ``pool``, plus a few from ``extra``."""
    k = min(len(pool), s.rng.randint(lo, hi))
    templates = s.rng.sample(pool, k)
    if extra:
        templates = templates[: s.rng.randint(2, 3)] + s.rng.sample(extra, s.rng.randint(2, 3))
    return _wrap(" ".join(s.sentence(t, i > 0) for i, t in enumerate(templates)))


def _pad(
    s: _Slots, topics: Mapping[str, v.Pool], budget: int, heading: Callable[[int, str], str]
) -> list[str]:
    """Headed paragraphs from ``topics`` totalling roughly ``budget`` characters."""
    out: list[str] = []
    names = list(topics)
    s.rng.shuffle(names)
    everything = tuple(t for pool in topics.values() for t in pool)
    per_topic = max(2, budget // 550 // len(names) + 1)
    used = 0
    for i, name in enumerate(names):
        if used + 400 > budget:
            return out
        block = heading(i, name)
        out.append(block)
        used += len(block) + 2
        for j in range(per_topic if i < len(names) - 1 else 1 << 30):
            if used >= budget:
                return out
            para = _paragraph(s, topics[name], extra=everything if j else ())
            if used + len(para) // 2 > budget and len(out) > 1:
                return out
            out.append(para)
            used += len(para) + 2
    return out


def company_name(index: int, seed: int = 0) -> tuple[str, int]:
    """Return the suffix-less company name for ``index`` and its industry number.

    Names are unique for every index below ``len(MIDDLES) * _NAME_SPACE`` (43,200) and
    beyond that get a numeric generation marker, so they never repeat.
    """
    block, j = divmod(index, _NAME_SPACE)
    k = (j * _STRIDE + seed * 7919) % _NAME_SPACE
    noun_i, root = divmod(k, len(v.ROOTS))
    industry, noun = divmod(noun_i, 3)
    gen, middle = divmod(block, len(v.MIDDLES))
    words = [v.ROOTS[root], v.MIDDLES[middle], v.INDUSTRIES[industry]["noun"][noun]]
    name = " ".join(w for w in words if w)
    return (f"{name} {gen + 1}" if gen else name), industry


def _slug(name: str, fiscal_year: int) -> str:
    base = "".join(c if c.isalnum() else "-" for c in name.lower())
    return "-".join(p for p in base.split("-") if p) + f"-{fiscal_year}-10k.txt"


def _money_k(x: int) -> str:
    """Thousands with separators, negatives in parentheses as in financial statements."""
    return f"{x:,}" if x >= 0 else f"({-x:,})"


def _income_statement(
    rng: random.Random, rev_k: int, prior_k: int, fy: int, fye: str
) -> tuple[str, float, float]:
    """The statement of operations table (in thousands) and the gross margins (percent) it implies."""
    share = rng.uniform(0.55, 0.85)
    gm, rd, sga = rng.uniform(0.25, 0.7), rng.uniform(0.03, 0.18), rng.uniform(0.1, 0.3)
    cur: dict[str, int] = {"tot": rev_k}
    pri: dict[str, int] = {"tot": prior_k}
    for d, drift in ((cur, 0.0), (pri, rng.uniform(-0.03, 0.03))):
        total = d["tot"]
        d["prod"] = round(total * (share + drift))
        d["svc"] = total - d["prod"]
        d["cogs"] = round(total * (1 - gm - drift))
        d["gp"] = total - d["cogs"]
        d["rd"], d["sga"] = round(total * rd), round(total * (sga + drift / 2))
        d["opex"] = d["rd"] + d["sga"]
        d["op"] = d["gp"] - d["opex"]
        d["oth"] = round(total * rng.uniform(-0.02, 0.01))
        d["pre"] = d["op"] + d["oth"]
        d["tax"] = round(d["pre"] * 0.21) if d["pre"] > 0 else round(total * 0.002)
        d["net"] = d["pre"] - d["tax"]
    lines = [
        "CONSOLIDATED STATEMENTS OF OPERATIONS",
        "(in thousands, except per share data)",
        "",
        f"{'':<46}{'Fiscal Year Ended ' + fye + ',':>36}",
        f"{'':<46}{fy:>16}{fy - 1:>20}",
        "Revenues:",
    ]
    for label, key, dollar in v.STATEMENT_ROWS:
        sign = "$" if dollar else " "
        lines.append(f"{label:<46}{sign}{_money_k(cur[key]):>15}{sign:>5}{_money_k(pri[key]):>15}")
        if key == "gp":
            lines.append("Operating expenses:")
    shares = rng.randint(20_000, 900_000)
    eps = (cur["net"] / shares, pri["net"] / shares)
    lines.append(f"{'Net income (loss) per share, diluted':<46}${eps[0]:>15.2f}{'$':>5}{eps[1]:>15.2f}")
    lines.append(f"{'Weighted-average diluted shares':<46} {shares:>15,}{shares - rng.randint(0, 900):>20,}")
    return "\n".join(lines), 100 * cur["gp"] / rev_k, 100 * pri["gp"] / prior_k


def _revenue(rng: random.Random, fy: int) -> tuple[int, int, str]:
    """Current and prior revenue in thousands, and the one MD&A sentence stating them."""
    if rng.random() < 0.3:  # billions, to 10 million precision
        units = rng.randint(100, 2500)
        rev_k = units * 10_000
        amount = f"{units / 100:.{2 if units % 10 else 1}f} billion"
    else:  # millions, to 100 thousand precision
        units = rng.randint(500, 99_999)
        rev_k = units * 100
        amount = f"{units // 10:,}.{units % 10} million"
    growth = -rng.uniform(0.02, 0.25) if rng.random() < 0.3 else rng.uniform(0.02, 0.35)
    prior_k = round(rev_k / (1 + growth))
    pct = round(abs(rev_k - prior_k) / prior_k * 100)
    change = f"an increase of {pct}%" if rev_k > prior_k else f"a decrease of {pct}%"
    return (
        rev_k,
        prior_k,
        f"Total revenue for fiscal {fy} was ${amount}, {change} compared with fiscal {fy - 1}.",
    )


def generate_filing(index: int, *, seed: int = 0, target_bytes: int = 40_000) -> tuple[str, FilingTruth]:
    """Generate one synthetic 10-K as ``(text, truth)``.

    Deterministic for ``(index, seed, target_bytes)``; the truth and the non-padding
    text depend only on ``(index, seed)``.  The text lands within a few percent of
    ``target_bytes`` unless that is below the unpadded size (about 10-13 KB).
    """
    rng = random.Random(f"synth-10k:{seed}:{index}")
    short, ind = company_name(index, seed)
    industry = v.INDUSTRIES[ind]
    suffix, state = rng.choice(v.SUFFIXES)
    fy = rng.randint(2023, 2026)
    fye, fye_code, file_month, file_offset = rng.choice(v.FISCAL_YEAR_ENDS)
    rev_k, prior_k, revenue_sentence = _revenue(rng, fy)
    statement, margin, prior_margin = _income_statement(rng, rev_k, prior_k, fy, fye)
    products, segments = rng.sample(industry["product"], 3), industry["segment"]
    person = [f"{rng.choice(v.GENERIC['first'])} {rng.choice(v.GENERIC['last'])}" for _ in range(2)]
    s = _Slots(rng, industry, {
        "name": short, "company": f"{short} {suffix}", "state": state, "desc": industry["desc"][0],
        "fy": str(fy), "prior_fy": str(fy - 1), "next_fy": str(fy + 1), "fye": fye, "fye_code": fye_code,
        "cik": f"{rng.randint(1_000_000, 1_999_999):010d}", "founded": str(fy - rng.randint(8, 90)),
        "hq": rng.choice(v.GENERIC["city"]), "offerings": f"{products[0]}, {products[1]} and {products[2]}",
        "segments": f"{', '.join(segments[:-1])} and {segments[-1]}", "sqft": f"{rng.randint(40, 600)},000",
        "ticker": short[:3].upper() + rng.choice("KLMNRSTX"), "holders": str(rng.randint(80, 4000)),
        "margin": f"{margin:.1f}", "prior_margin": f"{prior_margin:.1f}", "ceo": person[0], "cfo": person[1],
        "filed": f"{file_month} {rng.randint(10, 28)}, {fy + file_offset}",
        "auditor": rng.choice(v.GENERIC["auditor"]),
        "goal_year": str(fy + rng.randint(3, 7)), "audit_year": str(fy - rng.randint(3, 5)),
        "main_segment": segments[0], "main_share": str(rng.randint(40, 75)),
    })  # fmt: skip
    risks = rng.sample(v.RISKS, rng.randint(5, 9))
    truth = FilingTruth(s["company"], fy, float(rev_k * 1000), [t for t, _ in risks], _slug(short, fy))

    def para(*templates: str) -> str:
        return _wrap(" ".join(s.fill(t) for t in templates))

    business: list[str] = []
    for topic in ("Products and Services", "Customers", "Competition"):
        business += [topic, _paragraph(s, v.BUSINESS_BASE[topic], 3, 4)]
    headcount = f"As of the end of fiscal {fy}, we had approximately {rng.randint(180, 48_000):,} employees."
    business += ["Human Capital", para(headcount, *rng.sample(v.BUSINESS_BASE["Human Capital"], 2))]
    drivers = v.REVENUE_DRIVERS_UP if rev_k > prior_k else v.REVENUE_DRIVERS_DOWN
    slots = {
        "business": business,
        "risks": [para(f"{title}.", *rng.sample(body, rng.randint(1, 3)), rng.choice(v.RISK_CLOSERS))
                  for title, body in risks],
        "cyber": [para(*rng.sample(v.BUSINESS_PAD["Information Technology and Cybersecurity"], 2))],
        "mdna_overview": [para("{name} {desc}.", "The following discussion should be read together with our "
                               "consolidated financial statements.",
                               *rng.sample(v.MDNA_PRE["Key Trends and Uncertainties"], 2))],
        # the revenue sentence stays on one unwrapped line so simple regexes always find it
        "results": [revenue_sentence + "\n" + para(*rng.sample(drivers, rng.randint(2, 3)))],
        "statement": [statement],
    }  # fmt: skip
    blocks = [b if b.startswith("@") else para(b[1:]) if b.startswith("~") else s.fill(b) for b in v.SKELETON]
    fixed_size = sum(len(b) + 2 for b in blocks if not b.startswith("@"))
    fixed_size += sum(len(b) + 2 for blocks_ in slots.values() for b in blocks_)
    _add_padding(
        slots, s, random.Random(f"synth-10k-pad:{seed}:{index}:{target_bytes}"), target_bytes - fixed_size
    )
    out: list[str] = []
    for b in blocks:
        out.extend(slots[b[1:]] if b.startswith("@") else [b])
    return "\n\n".join(out) + "\n", truth


def _add_padding(slots: dict[str, list[str]], s: _Slots, rng: random.Random, deficit: int) -> None:
    """Fill the ``pad_*`` slots with about ``deficit`` characters of neutral paragraphs."""
    ps = _Slots(rng, s.industry, dict(s))
    ps.numbers = s.numbers
    deficit = max(0, deficit)
    pre_share = rng.uniform(0.0, 0.4)
    shares = {"item1": 0.35, "mdna_pre": 0.4 * pre_share, "mdna_post": 0.4 * (1 - pre_share), "notes": 0.25}
    if deficit < 8_000:  # small filings: pad only the business and MD&A narrative
        shares = {"item1": 0.5, "mdna_pre": 0.0, "mdna_post": 0.5, "notes": 0.0}
    topics = {"item1": v.BUSINESS_PAD, "mdna_pre": v.MDNA_PRE, "mdna_post": v.MDNA_POST, "notes": v.NOTES_PAD}
    for name, pool in topics.items():
        heading = (lambda i, t: f"Note {i + 2}. {t}") if name == "notes" else (lambda i, t: t)
        slots[f"pad_{name}"] = _pad(ps, pool, int(shares[name] * deficit), heading)


def write_filings(
    directory: Path, count: int, *, seed: int = 0, sizes: Sequence[int] | None = None
) -> list[FilingTruth]:
    """Write ``count`` filings to ``directory/<slug>.txt`` and return their truths.

    ``sizes[i]`` (when given and ``i < len(sizes)``) is the target size of filing ``i``;
    other filings use the default of 40,000 bytes.
    """
    directory.mkdir(parents=True, exist_ok=True)
    truths: list[FilingTruth] = []
    for i in range(count):
        target = sizes[i] if sizes is not None and i < len(sizes) else 40_000
        text, truth = generate_filing(i, seed=seed, target_bytes=target)
        (directory / truth.filename).write_text(text, encoding="utf-8", newline="\n")
        truths.append(truth)
    return truths


def truth_json(truths: Sequence[FilingTruth]) -> str:
    """Serialize truths as the ``examples/truth.json`` document, sorted by filename."""
    filings = [asdict(t) for t in sorted(truths, key=lambda t: t.filename)]
    keys = ("filename", "company", "fiscal_year", "revenue_usd", "risk_factor_titles")
    ordered = [{k: f[k] for k in keys} for f in filings]
    return json.dumps({"filings": ordered}, indent=2) + "\n"
