"""The filing's own inline-XBRL facts: total revenue, chosen by its context (pure).

A 10-K states its revenue twice: as text for a reader and as an `ix:nonFraction` fact with a
context (an entity, a period, perhaps dimensions), a unit, a `scale` and a `sign` (Inline XBRL
1.1). Naive matching fails: a filing reports revenue for three years, in segments (dimensions),
under one of several concepts. The fact taken is:

- of the first concept of REVENUE_CONCEPTS the filing uses for the current fiscal year (banks
  report `RevenuesNetOfInterestExpense`, most others `Revenues` or ASC 606's
  `RevenueFromContractWithCustomerExcludingAssessedTax`);
- in a context whose period is the document's own (the period of its `dei:` cover facts, the
  fiscal year: a duration, not an instant) and that has no dimension (not a segment's);
- in US dollars, its shown number read by its `format`, times 10^`scale`, negated by `sign="-"`.

Where no fact fits, `Revenue.why` says why: no inline XBRL, only other periods, only segment
facts, or only concepts outside the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date

from lxml import etree

REVENUE_CONCEPTS = (
    "us-gaap:Revenues",
    "us-gaap:RevenueFromContractWithCustomerExcludingAssessedTax",
    "us-gaap:RevenueFromContractWithCustomerIncludingAssessedTax",
    "us-gaap:RevenuesNetOfInterestExpense",
    "us-gaap:SalesRevenueNet",
    "us-gaap:SalesRevenueGoodsNet",
    "us-gaap:SalesRevenueServicesNet",
    "us-gaap:RegulatedAndUnregulatedOperatingRevenue",
    "us-gaap:RevenuesNetOfInterestExpenseAndProvisionForCreditLosses",
    "us-gaap:InterestAndDividendIncomeOperating",
    "us-gaap:RealEstateRevenueNet",
    "us-gaap:OperatingLeasesIncomeStatementLeaseRevenue",
    "us-gaap:ElectricUtilityRevenue",
    "us-gaap:OilAndGasRevenue",
)
"""Total revenue's concepts, most specific first: companies in general (ASC 606 and before),
banks (net of interest expense), utilities, REITs, insurers (`Revenues`)."""
FISCAL_YEAR_DAYS = (340, 380)
"""A fiscal year's duration, in days (52/53-week years included)."""
END_TOLERANCE_DAYS = 7
"""How far a context's end may lie from the document's period end (a 52/53-week year)."""

NO_XBRL = "no inline XBRL in the filing"
NO_PERIOD = "the filing's own period (its dei: cover facts' context) is not a fiscal year's duration"
NO_REVENUE = (
    "no revenue fact in the document (a 10-K that keeps its statements in its EX-13, as IBM's and "
    "Wells Fargo's do, has them in the complete submission file, not in its HTML alone)"
)


@dataclass(frozen=True)
class Context:
    id: str
    start: date | None
    end: date | None
    """The period's end (an instant's date for an instant)."""
    instant: bool
    dimensions: int

    @property
    def days(self) -> int | None:
        return (self.end - self.start).days if self.start and self.end else None


@dataclass(frozen=True)
class Fact:
    concept: str
    """Its name as written ("us-gaap:Revenues"), a us-gaap concept's prefix written `us-gaap`
    whatever the filer bound (`facts`)."""
    context: str
    unit: str | None
    value: float | None
    """The number, scale and sign applied; None when its shown text does not parse."""


@dataclass(frozen=True)
class Revenue:
    """The total-revenue fact taken (value, concept, context, period), or `why` there is none."""

    value_usd: float | None = None
    concept: str | None = None
    context: str | None = None
    start: date | None = None
    end: date | None = None
    why: str | None = None


@dataclass
class Facts:
    """The contexts, units (id -> measure) and numeric facts of inline-XBRL documents. A
    document set (a 10-K and its EX-13) keeps its contexts in one document's `ix:header` and its
    facts in all: `merged` puts them together."""

    contexts: dict[str, Context] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    numeric: list[Fact] = field(default_factory=list)

    def merged(self, other: Facts) -> Facts:
        return Facts(
            {**other.contexts, **self.contexts}, {**other.units, **self.units}, self.numeric + other.numeric
        )


INSTANCE = "http://www.xbrl.org/2003/instance"
DIMENSIONS = "http://xbrl.org/2006/xbrldi"
INLINE = "http://www.xbrl.org/2013/inlineXBRL"
US_GAAP = "http://fasb.org/us-gaap/"
USD = "iso4217:USD"
"""A unit of US dollars, as `facts` writes it whatever the filer's prefix."""
"""Namespaces (us-gaap's, its yearly versions' common start). XBRL lets a filer bind any prefix
to them (`xmlns:i=` for the instance): elements and concepts are matched by namespace."""


def prefixes(root: etree._Element) -> dict[str, str]:
    """The document's prefix -> namespace bindings (lxml's HTML parser keeps `xmlns:p` as
    attributes, on the root as inline XBRL declares them, or on the element that uses them)."""
    found: dict[str, str] = {}
    for element in (root, *root.iter("ix:header", "html", "body")):
        for name, value in element.attrib.items():
            if str(name).startswith("xmlns:"):
                found.setdefault(str(name)[6:].lower(), str(value))
    return found


def tags(bindings: dict[str, str], namespace: str, local: str, default: str) -> list[str]:
    """The tag names (as the HTML parser writes them, `prefix:local`) of `local` in
    `namespace`, under every prefix bound to it; `default:local` and `local` when none is."""
    names = [f"{prefix}:{local}" for prefix, uri in bindings.items() if uri == namespace]
    return names or [f"{default}:{local}", local]


def facts(root: etree._Element, bindings: dict[str, str] | None = None) -> Facts:
    """The facts of an inline-XBRL document, as lxml's HTML parser gives it (lower-case tag and
    attribute names), concepts named `us-gaap:Local` whatever prefix the filer bound
    (`bindings`: the document's `prefixes`, when the caller has read them)."""
    bindings = prefixes(root) if bindings is None else bindings

    def of(namespace: str, local: str, default: str) -> list[str]:
        return tags(bindings, namespace, local, default)

    contexts = {
        c.id: c for c in (_context(e, bindings) for e in root.iter(*of(INSTANCE, "context", "xbrli"))) if c.id
    }
    units = {}
    for unit in root.iter(*of(INSTANCE, "unit", "xbrli")):
        measure = " ".join(m.text or "" for m in unit.iter(*of(INSTANCE, "measure", "xbrli"))).strip()
        units[unit.get("id", "")] = USD if _usd(measure, bindings) else measure
    numeric = [
        Fact(
            concept=_concept(element.get("name", ""), bindings),
            context=element.get("contextref", ""),
            unit=element.get("unitref"),
            value=_value(element),
        )
        for element in root.iter(*of(INLINE, "nonfraction", "ix"))
    ]
    return Facts(contexts, units, numeric)


def _concept(name: str, bindings: dict[str, str]) -> str:
    """`name` with a us-gaap concept's prefix written `us-gaap` (a filer may bind another)."""
    prefix, _, local = name.partition(":")
    if local and bindings.get(prefix.lower(), "").startswith(US_GAAP):
        return f"us-gaap:{local}"
    return name


def _usd(measure: str, bindings: dict[str, str]) -> bool:
    """One measure, US dollars (ISO 4217), whatever the prefix of its namespace."""
    prefix, _, code = measure.strip().rpartition(":")
    uri = bindings.get(
        prefix.lower(), "http://www.xbrl.org/2003/iso4217" if prefix.lower() == "iso4217" else ""
    )
    return code == "USD" and (uri == "http://www.xbrl.org/2003/iso4217" or not prefix)


def revenue(root: etree._Element, document_context: str | None) -> Revenue:
    """Total revenue for the document's own fiscal year (`document_context`: the context of its
    dei: cover facts), or why there is none."""
    return revenue_of(facts(root), document_context)


def revenue_of(found: Facts, document_context: str | None) -> Revenue:
    """`revenue`, of facts already read (a document set's, merged)."""
    contexts, numeric = found.contexts, found.numeric
    if not numeric and not contexts:
        return Revenue(why=NO_XBRL)
    own = contexts.get(document_context or "")
    if own is None or own.instant or not own.end:
        own = _fiscal_year_of(contexts)
        if own is None:
            return Revenue(why=NO_PERIOD)
    usd = {uid for uid, measure in found.units.items() if measure == USD}
    listed = [f for f in numeric if f.concept.lower() in _LISTED and f.value is not None]
    for concept in REVENUE_CONCEPTS:
        for fact in listed:
            ctx = contexts.get(fact.context)
            if fact.concept.lower() != concept.lower() or not ctx or fact.unit not in usd:
                continue
            if _same_year(ctx, own) and not ctx.dimensions:
                return Revenue(fact.value, fact.concept, fact.context, ctx.start, ctx.end)
    return Revenue(why=_why_none(listed, numeric, contexts, own))


def _why_none(listed: list[Fact], numeric: list[Fact], contexts: dict[str, Context], own: Context) -> str:
    if listed:
        current = [f for f in listed if (c := contexts.get(f.context)) and _same_year(c, own)]
        if not current:
            return "no duration fact for the current fiscal year (only other periods)"
        if all((c := contexts.get(f.context)) and c.dimensions for f in current):
            return "only segment facts (every revenue fact of the year has dimensions)"
        return "no revenue fact in US dollars"
    others = sorted({f.concept for f in numeric if "revenue" in f.concept.lower()})
    if others:
        return f"a revenue concept outside the list ({', '.join(others[:3])})"
    return NO_REVENUE


_LISTED = {concept.lower() for concept in REVENUE_CONCEPTS}


def _same_year(ctx: Context, own: Context) -> bool:
    if ctx.instant or not ctx.end or not own.end or ctx.days is None:
        return False
    near = abs((ctx.end - own.end).days) <= END_TOLERANCE_DAYS
    return near and FISCAL_YEAR_DAYS[0] <= ctx.days <= FISCAL_YEAR_DAYS[1]


def _fiscal_year_of(contexts: dict[str, Context]) -> Context | None:
    """Without the cover's context: the latest fiscal-year duration without dimensions."""
    years = [c for c in contexts.values() if not c.instant and not c.dimensions and c.days]
    years = [c for c in years if FISCAL_YEAR_DAYS[0] <= (c.days or 0) <= FISCAL_YEAR_DAYS[1]]
    return max(years, key=lambda c: c.end or date.min, default=None)


def _context(element: etree._Element, bindings: dict[str, str]) -> Context:
    def first(local: str) -> str | None:
        found = next(element.iter(*tags(bindings, INSTANCE, local, "xbrli")), None)
        return (found.text or "").strip() if found is not None else None

    instant = first("instant")
    # A dimension is any member under the segment or scenario, whatever its prefix.
    holders = tags(bindings, INSTANCE, "segment", "xbrli") + tags(bindings, INSTANCE, "scenario", "xbrli")
    dimensions = sum(
        1
        for holder in element.iter(*holders)
        for member in holder.iter()
        if isinstance(member.tag, str) and member.tag.endswith(("explicitmember", "typedmember"))
    )
    return Context(
        id=element.get("id", ""),
        start=_date(first("startdate")),
        end=_date(instant or first("enddate")),
        instant=instant is not None,
        dimensions=dimensions,
    )


def _date(value: str | None) -> date | None:
    try:
        return date.fromisoformat(value[:10]) if value else None
    except ValueError:
        return None


_ZERO_FORMATS = ("fixed-zero", "zerodash", "fixedzero")
_WORDS = {
    word: n
    for n, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
        ]
    )
} | {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}


def _number_words(shown: str) -> float | None:
    """`ixt-sec:numwordsen`: a number written in English words ("three", "twenty-one", "no")."""
    words = re.findall(r"[a-z]+", shown.lower())
    if words in (["no"], ["none"]):
        return 0.0
    total, current = 0, 0
    for word in words:
        if word in _WORDS:
            current += _WORDS[word]
        elif word == "hundred":
            current *= 100
        elif word in _SCALES:
            total, current = total + current * _SCALES[word], 0
        elif word != "and":
            return None
    return float(total + current) if words else None


def _value(element: etree._Element) -> float | None:
    """The fact's number: its shown text read by its `format` (ixt: num-dot-decimal,
    num-comma-decimal, fixed-zero...), times 10^scale, negated by sign="-"."""
    shown = "".join(str(piece) for piece in element.itertext()).strip()
    fmt = (element.get("format") or "").lower().split(":")[-1]
    if element.get("xsi:nil") == "true":
        return None
    if "numwordsen" in fmt:
        words = _number_words(shown)
        if words is None:
            return None
        number = words
    elif any(name in fmt for name in _ZERO_FORMATS) or shown in ("-", "—", "–"):
        number = 0.0
    else:
        digits = shown.replace(" ", "").replace("\u00a0", "")
        if "comma-decimal" in fmt or "numcommadecimal" in fmt:
            digits = digits.replace(".", "").replace(",", ".")
        else:
            digits = digits.replace(",", "")
        cleaned = re.sub(r"[^0-9.]", "", digits)
        try:
            number = float(cleaned)
        except ValueError:
            return None
    try:
        scale = int(element.get("scale") or 0)
    except ValueError:
        scale = 0
    number *= 10.0**scale
    return -number if element.get("sign") == "-" else number
