"""Is a reply's text an out-of-office notice, and when is its writer back? Pure, on text.

Phrasings in English, German, French, Spanish, Italian, Dutch and Portuguese. The return date
is read from the reply's own text (not the thread it quotes, nurture.intake.opt_out cuts that):
a date a return or "until" word stands just before ("back on 3 December", "bis zum 03.12.",
"de retour le 3 décembre", "hasta el 3 de diciembre") wins; else the latest date the text
names (an absence "from 1 to 5 December" ends on the last one). A date without a year is its
next occurrence from `today`; a date before `today` or more than MAX_AHEAD_DAYS after it is no
return date (a typo, or a signature's founding year). Numeric dates are day first
(03.12.2026, 03/12/2026) unless the text is English and the first number can be a month
(12/03/2026 is 3 December in an American notice).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

__all__ = ["AUTO_REPLY_SUBJECT", "is_out_of_office", "return_date"]

MAX_AHEAD_DAYS = 366
READ_CHARS = 4000  # a notice says it at the top

_OOO = re.compile(
    r"""\b(?:
        out\s+of\s+(?:the\s+)?office | ooo\b | on\s+(?:annual\s+|parental\s+|maternity\s+|paternity\s+|sick\s+)?leave
      | on\s+(?:vacation|holiday|holidays) | away\s+from\s+(?:my\s+|the\s+)?(?:desk|office|e-?mail)
      | limited\s+access\s+to\s+(?:my\s+)?e-?mail | currently\s+(?:away|travelling|traveling|out)
      | nicht\s+im\s+b(?:ü|ue)ro | au(?:ß|ss)er\s+haus | im\s+urlaub | abwesend | abwesenheit
      | absente?\s+du\s+bureau | en\s+cong[ée]s? | actuellement\s+absente? | je\s+suis\s+absente?
      | fuera\s+de\s+la\s+oficina | de\s+vacaciones | estoy\s+ausente | ausente\s+hasta
      | fuori\s+(?:ufficio|sede) | in\s+ferie | sono\s+assente
      | niet\s+op\s+kantoor | met\s+vakantie | ben\s+afwezig | afwezig\s+tot
      | fora\s+do\s+escrit[óo]rio | de\s+f[ée]rias | estou\s+ausente
    )""",
    re.IGNORECASE | re.VERBOSE,
)
# The subject an auto-responder gives its notice ("Automatic reply: Re: ...").
AUTO_REPLY_SUBJECT = re.compile(
    r"""^\s*(?:
        automatic\s+reply | auto(?:matic)?[\s-]?(?:reply|response) | out\s+of\s+(?:the\s+)?office(?:\s+auto-?reply)?
      | abwesenheitsnotiz | automatische\s+antwort | r[ée]ponse\s+automatique | absence\s+du\s+bureau
      | respuesta\s+autom[áa]tica | risposta\s+automatica | automatisch\s+antwoord
      | resposta\s+autom[áa]tica | fuori\s+sede | afwezig
    )\s*:""",
    re.IGNORECASE | re.VERBOSE,
)

_MONTHS = {
    **dict.fromkeys(["january", "jan", "januar", "janvier", "enero", "gennaio", "januari", "janeiro"], 1),
    **dict.fromkeys(
        ["february", "feb", "februar", "février", "fevrier", "febrero", "febbraio", "februari", "fevereiro"],
        2,
    ),
    **dict.fromkeys(["march", "mar", "märz", "maerz", "mars", "marzo", "maart", "março", "marco"], 3),
    **dict.fromkeys(["april", "apr", "avril", "abril", "aprile"], 4),
    **dict.fromkeys(["may", "mai", "mayo", "maggio", "mei", "maio"], 5),
    **dict.fromkeys(["june", "jun", "juni", "juin", "junio", "giugno", "junho"], 6),
    **dict.fromkeys(["july", "jul", "juli", "juillet", "julio", "luglio", "julho"], 7),
    **dict.fromkeys(["august", "aug", "août", "aout", "agosto", "augustus"], 8),
    **dict.fromkeys(["september", "sep", "sept", "septembre", "septiembre", "settembre", "setembro"], 9),
    **dict.fromkeys(["october", "oct", "oktober", "octobre", "octubre", "ottobre", "outubro", "okt"], 10),
    **dict.fromkeys(["november", "nov", "novembre", "noviembre", "novembro"], 11),
    **dict.fromkeys(
        ["december", "dec", "dezember", "décembre", "decembre", "diciembre", "dicembre", "dezembro", "dez"],
        12,
    ),
}
_MONTH = "(?P<month>" + "|".join(sorted(map(re.escape, _MONTHS), key=len, reverse=True)) + r")(?![^\W\d_])\.?"
_YEAR = r"(?:,?\s*(?P<year>20\d\d))?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th|er|\.|º)?"
_DATES = [
    re.compile(r"\b(?P<year>20\d\d)-(?P<month>[01]?\d)-(?P<day>[0-3]?\d)\b"),
    re.compile(r"\b(?P<a>[0-3]?\d)[./](?P<b>[01]?\d)(?:[./](?P<year>(?:20)?\d\d))?\b\.?"),
    re.compile(rf"\b{_DAY}\s*(?:de\s+)?{_MONTH}(?:\s+de)?{_YEAR}", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY}{_YEAR}", re.IGNORECASE),
]
_RETURN_WORD = re.compile(
    r"""(?:until|till|til|through|thru|back\s+(?:on|in\s+the\s+office\s+on)?|return(?:ing)?(?:\s+on)?|from
      | bis(?:\s+(?:zum|einschlie(?:ß|ss)lich))? | ab | wieder | jusqu'(?:au|à)|de\s+retour(?:\s+le)?|retour\s+le
      | hasta(?:\s+el)? | de\s+vuelta(?:\s+el)? | fino\s+al | rientro(?:\s+il)? | tot(?:\s+en\s+met)? | terug
      | at[ée](?:\s+(?:o|dia))? | volto(?:\s+(?:no\s+)?dia)?)\W{0,3}(?:\w+\W{1,3}){0,2}$""",
    re.IGNORECASE | re.VERBOSE,
)


def is_out_of_office(text: str) -> bool:
    """True when the text says its writer is away (out of office, on leave, on holiday)."""
    return _OOO.search(text[:READ_CHARS]) is not None


def return_date(text: str, *, today: date, english: bool = True) -> date | None:
    """The date the writer says they are back (see the module docstring), or None."""
    text = text[:READ_CHARS]
    found: list[tuple[int, date]] = []  # (position, date) of every plausible date
    for pattern in _DATES:
        for match in pattern.finditer(text):
            when = _date_of(match, today=today, english=english)
            if when is not None and today <= when <= today + timedelta(days=MAX_AHEAD_DAYS):
                found.append((match.start(), when))
    if not found:
        return None
    announced = [when for start, when in found if _RETURN_WORD.search(text[max(0, start - 40) : start])]
    return announced[0] if announced else max(when for _, when in found)


def _date_of(match: re.Match[str], *, today: date, english: bool) -> date | None:
    groups = match.groupdict()
    if groups.get("a") is not None:
        first, second = int(groups["a"]), int(groups["b"])
        day, month = (second, first) if english and first <= 12 and "/" in match.group(0) else (first, second)
    else:
        month_text = (groups.get("month") or "").lower().rstrip(".")
        month = _MONTHS[month_text] if month_text in _MONTHS else int(month_text or 0)
        day = int(groups["day"])
    year_text = groups.get("year")
    year = (2000 + int(year_text) if len(year_text) == 2 else int(year_text)) if year_text else None
    return _valid(year, month, day, today=today)


def _valid(year: int | None, month: int, day: int, *, today: date) -> date | None:
    for candidate_year in [year] if year is not None else [today.year, today.year + 1]:
        try:
            when = date(candidate_year, month, day)
        except ValueError:
            return None
        if year is not None or when >= today:
            return when
    return None
