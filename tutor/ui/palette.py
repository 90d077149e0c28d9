"""Colours by what they mean, taken from the app's Textual theme.

The panels are drawn with Rich (`Text`, `Table`), which cannot read Textual's `$success` or
`$error`. So the app keeps a Rich theme on its console whose style names (`tutor.good`,
`tutor.bad`, ...) are made from the current Textual theme's colours, and renews it whenever the
theme changes: a light theme gets text that reads on light ground, and every Textual theme
(ctrl+p → "Change theme") colours the verdicts its own way. Code in a style string names the
role (`style=GOOD`), never a colour.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from weakref import WeakKeyDictionary

from rich.console import Console
from rich.errors import MissingStyle
from rich.style import Style
from rich.text import Span, Text
from rich.theme import Theme
from textual.app import App
from textual.color import Color

# Style name -> (the Textual theme variable it takes its colour from, Rich attributes).
ROLES: dict[str, tuple[str, str]] = {
    "tutor.good": ("text-success", "bold"),  # a pass, an exact row
    "tutor.ok": ("text-success", ""),  # done, quietly
    "tutor.bad": ("text-error", "bold"),  # a failure's headline
    "tutor.error": ("text-error", ""),
    "tutor.alert": ("text-warning", "bold"),  # the open step, titles, a row to look into
    "tutor.warn": ("text-warning", ""),  # work under way, a diagnosis
    "tutor.info": ("text-primary", ""),  # approximate rows, what a pass unlocked
    "tutor.info-strong": ("text-primary", "bold"),
    "tutor.reveal": ("text-secondary", ""),  # revealed solutions
    "tutor.reveal-strong": ("text-secondary", "bold"),
    "tutor.heading": ("foreground", "bold"),
    "tutor.text": ("foreground", ""),
    "tutor.dim": ("foreground-muted", ""),  # explanations around the numbers
    "tutor.locked": ("foreground-disabled", ""),
    "tutor.current-row": ("primary-background", "on"),  # the forward line being worked on
    "tutor.code": ("foreground", "bold"),  # `code` in a pack's prose
    # Python, in the editor and in read-only code alike, by token (as tutor.ui.highlight names
    # them): keywords and constants in the primary colour, numbers green, strings and calls warm,
    # as code editors' dark themes colour them, but in the theme's own colours.
    "tutor.code.comment": ("foreground-muted", "italic"),
    "tutor.code.string": ("text-warning", ""),
    "tutor.code.number": ("text-success", ""),
    "tutor.code.boolean": ("text-primary", ""),
    "tutor.code.keyword": ("text-primary", ""),
    "tutor.code.keyword.operator": ("text-primary", ""),
    "tutor.code.operator": ("foreground", ""),
    "tutor.code.function.call": ("text-accent", ""),
    "tutor.code.function": ("text-accent", ""),
    "tutor.code.class": ("text-accent", "bold"),
    # A heatmap's ramps: from zero (just off the panel's ground) to how far off, or to a sign.
    "tutor.heat.zero": ("surface", ""),
    "tutor.heat.far": ("error", ""),
    "tutor.heat.negative": ("primary", ""),
    "tutor.heat.positive": ("warning", ""),
    "tutor.heat.axis": ("foreground-muted", ""),
}

GOOD, OK, BAD, ERROR = "tutor.good", "tutor.ok", "tutor.bad", "tutor.error"
ALERT, WARN, INFO, INFO_STRONG = "tutor.alert", "tutor.warn", "tutor.info", "tutor.info-strong"
REVEAL, REVEAL_STRONG = "tutor.reveal", "tutor.reveal-strong"
HEADING, TEXT, DIM, LOCKED = "tutor.heading", "tutor.text", "tutor.dim", "tutor.locked"
CURRENT_ROW = "tutor.current-row"
CODE = "tutor.code"
HEAT_ZERO, HEAT_FAR = "tutor.heat.zero", "tutor.heat.far"
HEAT_NEGATIVE, HEAT_POSITIVE, HEAT_AXIS = (
    "tutor.heat.negative", "tutor.heat.positive", "tutor.heat.axis")


def code_style(token: str) -> str:
    """The style name for a token of Python ("keyword", "string", ...; see tutor.ui.highlight)."""
    return f"tutor.code.{token}"


def solid(value: str, background: Color) -> str:
    """A theme colour as Rich can use it: translucent ones laid over the background."""
    colour = Color.parse(value)
    return (background + colour).hex if colour.a < 1 else colour.hex


def rich_theme(variables: Mapping[str, str]) -> Theme:
    """The roles' styles from a Textual theme's variables (`App.get_css_variables()`)."""
    background = Color.parse(variables["background"])
    styles = {}
    for name, (variable, attributes) in ROLES.items():
        styles[name] = f"{attributes} {solid(variables[variable], background)}".strip()
    return Theme(styles)


# The theme each app's console has the roles' styles for.
_installed: WeakKeyDictionary[App, str] = WeakKeyDictionary()


def install(app: App, variables: Mapping[str, str] | None = None) -> None:
    """Give the app's console the roles' styles for its current theme; again after the theme
    changed, a no-op otherwise. Any app that shows the tutor's screens calls it. `variables`
    are the theme's, when the caller has them at hand (`App.theme_variables` right after
    `App.__init__`, which worked them out): building them again costs the first frame."""
    if _installed.get(app) == app.theme:
        return
    if app in _installed:
        app.console.pop_theme()
    app.console.push_theme(rich_theme(variables or app.get_css_variables()))
    _installed[app] = app.theme


@cache
def _default_theme() -> Theme:
    from textual.theme import BUILTIN_THEMES

    return rich_theme(BUILTIN_THEMES["textual-dark"].to_color_system().generate())


def style_of(name: str, console: Console) -> Style:
    """The style a role's name stands for on `console`; on a console no app gave the roles (a
    test's, say), the one it stands for in Textual's default theme."""
    try:
        return console.get_style(name)
    except MissingStyle:
        return _default_theme().styles[name]


def resolved(text: Text, console: Console) -> Text:
    """`text` with its style names replaced by the styles they stand for on `console`.

    Widgets that turn Rich text into Textual content themselves (an OptionList's prompts) parse
    style strings as Textual styles, which know no Rich theme: a name would lose its colour
    there, and costs a failed parse each time."""

    def style(value: str | Style) -> Style:
        return console.get_style(value, default=Style.null()) if isinstance(value, str) else value

    out = text.copy()
    out.style = style(text.style)
    out.spans = [Span(span.start, span.end, style(span.style)) for span in text.spans]
    return out
