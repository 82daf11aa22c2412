"""PII scrubbing: personal data replaced by typed placeholders, counted per type (``pii.<type>``).

Types and what counts as a true positive:
- ``email`` -> <EMAIL>: local@domain.tld (ASCII, a dot in the domain, a letter in the TLD).
- ``phone`` -> <PHONE>: a mainland-China mobile number 1[3-9]X XXXX XXXX (11 digits, optionally
  written 3-4-4 with spaces or hyphens, optionally after +86 / 0086 / 86-), not inside a longer
  run of digits.
- ``id`` -> <ID>: an 18-character resident identity number whose province code exists, whose
  birth date is a real date between 1900 and today, and whose ISO 7064 MOD 11-2 check character
  is right.
- ``bank_card`` -> <BANK_CARD>: 13-19 digits (optionally in groups of 4 separated by one space or
  hyphen) starting with 3-6 (card networks; 62 is UnionPay) that pass the Luhn check, unless
  the 12 characters before it name it an order/tracking/invoice number.
- ``ip`` -> <IP>: an IPv4 address with four octets 0-255 (no leading zeros), not part of a longer
  dotted number and not after "v", "version", "ver." or "版本" (version strings); loopback,
  unspecified and documentation-free addresses such as 127.0.0.1 and 0.0.0.0 are kept (they
  identify no one). IPv6: a valid address (checked with ``ipaddress``) with at least two colons
  and at least one letter or "::", excluding ::1 and ::.
- ``url_secret`` -> <SECRET>: the value of a URL query or fragment parameter named like a
  credential (token, access_token, api_key, apikey, key, secret, password, passwd, pwd, sig,
  signature, auth, session, sessionid, sid, code), and user:password@ credentials in URLs.

Look-alikes left alone (tested): order numbers, dates, timestamps, version strings, prices.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dataprep.document import Document
from dataprep.stage import MapStage, StageContext, StageResult, param, register
from stages._charclass import batch_chars, decimal_counts, decimal_low, mostly_wide

TYPES = ("email", "phone", "id", "bank_card", "ip", "url_secret")
PLACEHOLDERS = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "id": "<ID>",
    "bank_card": "<BANK_CARD>",
    "ip": "<IP>",
    "url_secret": "<SECRET>",
}

EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b"
)
PHONE = re.compile(r"(?<![\d+])(?:(?:\+|00)?86[ -]?)?1[3-9]\d(?:\d{8}|[ -]\d{4}[ -]\d{4})(?!\d)")
ID18 = re.compile(r"(?<![\dA-Za-z])[1-9]\d{16}[\dXx](?![\dA-Za-z])")
CARD = re.compile(r"(?<![\d-])[3-6]\d{3}(?:[ -]?\d{4}){2}[ -]?\d{1,4}(?:[ -]?\d{1,3})?(?![\d-])")
IPV4 = re.compile(
    r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)"
)
IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
# cheap pre-checks (patterns that start with a digit scan fast): a run of 7+ digits, possibly
# split by one space or hyphen (phones, IDs, cards all hold one), and digit.digits.digit
LONG_NUMBER_HINT = re.compile(r"\d\d\d[ -]?\d\d\d\d")
IPV4_HINT = re.compile(r"\d\.\d{1,3}\.\d")
URL = re.compile(r"(?:https?|ftp)://[^\s<>\"'，。！？；：、（）【】「」]+", re.I)
SECRET_PARAM = re.compile(
    r"([?&#;](?:access_token|refresh_token|id_token|token|api_key|apikey|api-key|key|secret|client_secret|"
    r"password|passwd|pwd|sig|signature|auth|auth_token|session|sessionid|session_id|sid|code)=)([^&#\s]+)",
    re.I,
)
URL_CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)")
VERSION_BEFORE = re.compile(r"(?:\bv|\bversion|\bver\.?|\brelease|\brev\.?|版本|版本号)\s*[:：]?\s*$", re.I)
ORDER_BEFORE = re.compile(r"(?:订单|单号|运单|快递|编号|发票|流水|order|tracking|invoice|serial|no\.)", re.I)
PROVINCES = {
    11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46, 50, 51, 52,
    53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83, 91,
}  # fmt: skip
ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
ID_CHECK = "10X98765432"


def valid_resident_id(s: str) -> bool:
    """18-character PRC resident identity number: province, birth date and check character."""
    if len(s) != 18 or not s[:17].isdigit() or int(s[:2]) not in PROVINCES:
        return False
    try:
        born = datetime.date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    if not datetime.date(1900, 1, 1) <= born <= datetime.date.today():
        return False
    total = sum(int(c) * w for c, w in zip(s[:17], ID_WEIGHTS, strict=True))
    return ID_CHECK[total % 11] == s[17].upper()


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a digit string."""
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = ord(c) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# What the checks need (bits of ``text_hints``): ":" (URLs, IPv6), "@" (e-mail), at least 7
# decimal digits (phones, IDs, cards: LONG_NUMBER_HINT), 3 digits and a "." (IPV4_HINT).
P_COLON, P_AT, P_7_DIGITS, P_IPV4 = (1 << i for i in range(4))
ALL_HINTS = 0xF


@lru_cache(maxsize=1)
def _hint_table() -> np.ndarray:
    """uint8 per code point: 1 ":", 2 "@", 4 ".", 8 a decimal digit (below U+20000)."""
    table = np.zeros(0x110000, dtype=np.uint8)
    table[ord(":")] = 1
    table[ord("@")] = 2
    table[ord(".")] = 4
    table[:0x20000][decimal_low()] = 8
    return table


def text_hints(texts: list[str]) -> list[int]:
    """Per text, the P_* bits of what it holds (\\d digits as re counts them)."""
    bc = batch_chars(texts)
    t = _hint_table()[bc.cps]
    starts = bc.starts[:-1]
    held = np.bitwise_or.reduceat(t, starts).astype(np.int64)
    digits = np.add.reduceat(t >= 8, starts)
    if (bc.cps >= 0x20000).any():  # digits beyond U+20000 are looked at one by one
        digits = decimal_counts(bc)
    flags = np.where(held & 1, P_COLON, 0) | np.where(held & 2, P_AT, 0)
    flags |= np.where(digits >= 7, P_7_DIGITS, 0)
    flags |= np.where((digits >= 3) & ((held & 4) != 0), P_IPV4, 0)
    return flags.tolist()


@dataclass
class PiiParams:
    types: list[str] = param(list(TYPES), help="PII types to replace: " + ", ".join(TYPES))
    keep_ips: list[str] = param(["127.0.0.1", "0.0.0.0", "255.255.255.255"], help="IPv4 addresses kept")

    def validate(self) -> None:
        bad = sorted(set(self.types) - set(TYPES))
        if bad:
            raise ValueError(f"unknown PII types {bad}; valid: {', '.join(TYPES)}")


class PiiScrubber:
    """``scrub(text) -> (text, {type: count})`` for the enabled types."""

    def __init__(self, p: PiiParams):
        self.types = set(p.types)
        self.keep_ips = set(p.keep_ips)

    def scrub(self, text: str, hints: int = ALL_HINTS) -> tuple[str, dict[str, int]]:
        """(text with placeholders, {type: count}). ``hints`` (from ``text_hints``): what ``text``
        holds; a check needing what it lacks is skipped (replacements only remove characters)."""
        counts: dict[str, int] = {}

        def hit(kind: str) -> str:
            counts[kind] = counts.get(kind, 0) + 1
            return PLACEHOLDERS[kind]

        t = self.types
        if "url_secret" in t and hints & P_COLON and "://" in text:
            text = URL.sub(self._url, text)
            n = text.count(PLACEHOLDERS["url_secret"])
            if n:
                counts["url_secret"] = n
        if "email" in t and hints & P_AT and "@" in text:
            text = EMAIL.sub(lambda m: hit("email"), text)
        long_number = bool(hints & P_7_DIGITS) and LONG_NUMBER_HINT.search(text) is not None
        if long_number and "id" in t:
            text = ID18.sub(lambda m: hit("id") if valid_resident_id(m.group()) else m.group(), text)
        if long_number and "bank_card" in t:

            def card(m: re.Match[str]) -> str:
                digits = re.sub(r"[ -]", "", m.group())
                if not 13 <= len(digits) <= 19 or not luhn_ok(digits):
                    return m.group()
                if ORDER_BEFORE.search(m.string, max(0, m.start() - 12), m.start()):
                    return m.group()
                return hit("bank_card")

            text = CARD.sub(card, text)
        if long_number and "phone" in t:
            text = PHONE.sub(lambda m: hit("phone"), text)
        if "ip" in t:
            if hints & P_IPV4 and IPV4_HINT.search(text):
                text = IPV4.sub(self._ipv4(hit), text)
            if hints & P_COLON and ("::" in text or text.count(":") >= 7):
                text = IPV6.sub(self._ipv6(hit), text)
        return text, counts

    @staticmethod
    def _url(m: re.Match[str]) -> str:
        url = URL_CREDENTIALS.sub(PLACEHOLDERS["url_secret"], m.group())
        return SECRET_PARAM.sub(lambda s: s.group(1) + PLACEHOLDERS["url_secret"], url)

    def _ipv4(self, hit):  # type: ignore[no-untyped-def]
        def f(m: re.Match[str]) -> str:
            s = m.group()
            if s in self.keep_ips or VERSION_BEFORE.search(m.string, max(0, m.start() - 12), m.start()):
                return s
            return hit("ip")

        return f

    @staticmethod
    def _ipv6(hit):  # type: ignore[no-untyped-def]
        def f(m: re.Match[str]) -> str:
            s = m.group()
            if s.count(":") < 2 or s in ("::", "::1") or (not any(c.isalpha() for c in s) and "::" not in s):
                return s
            try:
                ipaddress.IPv6Address(s)
            except ValueError:
                return s
            return hit("ip")

        return f


@register
class Pii(MapStage):
    """Replace e-mails, phones, resident IDs, bank cards, IPs and URL secrets by placeholders."""

    name = "pii"
    Params = PiiParams

    def __init__(self, params: PiiParams):
        super().__init__(params)
        self.scrubber = PiiScrubber(params)

    def process(self, batch: list[Document], ctx: StageContext) -> list[StageResult]:
        totals: dict[str, int] = {}
        changed = 0
        texts = [d.text for d in batch]
        wide = mostly_wide(texts)
        if wide is None:
            all_hints = text_hints(texts) if batch else []
        else:  # mostly ASCII: every check (they would all run anyway)
            all_hints = [ALL_HINTS] * len(texts)
            for i, h in zip(wide, text_hints([texts[i] for i in wide]) if wide else [], strict=True):
                all_hints[i] = h
        for doc, hints in zip(batch, all_hints, strict=True):
            if not hints:
                continue
            text, counts = self.scrubber.scrub(doc.text, hints)
            if counts:
                changed += 1
                doc.text = text
                for k, v in counts.items():
                    totals[k] = totals.get(k, 0) + v
        for k, v in totals.items():
            ctx.stats.count(f"pii.{k}", v)
        ctx.stats.count("docs_changed", changed)
        return list(batch)
