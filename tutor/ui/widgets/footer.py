"""The key bar, fitted to the terminal: whole keys only, the least needed left out first.

A key bar of our own, drawn from the screen's active bindings (`Screen.active_bindings`) as one
line: Textual's Footer lays every key out in one row and clips what does not fit, so a narrow
terminal showed half a key ("K" of "Keys"). This one leaves keys out, in `DROP_ORDER`, until
the rest fits, and keeps the palette's key on the right; every key stays listed in the help
screen (F9). A key is clicked, hovered and explained (its tooltip) like Textual's.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual import events
from textual.screen import Screen
from textual.widget import Widget

# Actions whose keys go first when space runs short (the rest keep their places). The training
# screen's Code/Run stays after its reset: on a narrow terminal it is the only way to the run.
DROP_ORDER = ("previous_step", "explain", "scratch", "next_step", "reset_code", "toggle_view",
              "steps", "help", "back", "reveal", "hint")
PALETTE_WIDTH = 12  # "▏^p palette" with its margin
EDGE = "▏"  # the palette key's left edge


@dataclass(frozen=True)
class Key:
    """One key as the bar shows it."""

    key: str  # what pressing it is, for a click (e.g. "ctrl+j")
    display: str  # how it is written ("^j")
    description: str
    action: str
    enabled: bool
    tooltip: str

    @property
    def width(self) -> int:
        # The key, a space, the description, one column of margin.
        return len(self.display) + (1 + len(self.description) if self.description else 0) + 1


def fit(keys: list[Key], room: int) -> list[Key]:
    """The keys to show in `room` columns, in their own order."""
    kept = list(keys)
    rank = {action: i for i, action in enumerate(DROP_ORDER)}
    while kept and sum(k.width for k in kept) > room:
        droppable = [k for k in kept if k.action in rank]
        victim = (min(droppable, key=lambda k: rank[k.action]) if droppable else kept[-1])
        kept.remove(victim)
    return kept


class TutorFooter(Widget, can_focus=False):
    """A compact key bar that shows only keys that fit completely."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"tutor-footer--key", "tutor-footer--description",
                         "tutor-footer--edge", "tutor-footer--hover"}
    DEFAULT_CSS = """
    TutorFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .tutor-footer--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .tutor-footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .tutor-footer--edge {
            color: $foreground 20%;
        }
        .tutor-footer--hover {
            color: $footer-key-foreground;
            background: $block-hover-background;
        }
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self._keys: list[Key] = []  # every key the screen shows, in its order
        self._palette: Key | None = None
        # Where each shown key lies on the line: (first column, column after it, the key).
        self._places: list[tuple[int, int, Key]] = []
        self._hovered: Key | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        # The screen refreshes its bindings after every check; the bar is drawn again only
        # when what it shows changed.
        keys, palette = self._read(screen)
        if (keys, palette) != (self._keys, self._palette):
            self._keys, self._palette = keys, palette
            self.refresh()

    def _read(self, screen: Screen) -> tuple[list[Key], Key | None]:
        app = self.app
        keys: dict[str, Key] = {}  # one per action, its first key, as Textual's footer shows
        palette = None
        for key, (_, binding, enabled, tooltip) in screen.active_bindings.items():
            shown = Key(binding.key, app.get_key_display(binding), binding.description,
                        binding.action, enabled, tooltip or binding.tooltip)
            if key == app.COMMAND_PALETTE_BINDING and app.ENABLE_COMMAND_PALETTE:
                palette = shown
            elif binding.show and binding.action not in keys:
                keys[binding.action] = shown
        return list(keys.values()), palette

    def _layout(self, width: int) -> tuple[list[Key], Key | None]:
        palette = self._palette
        room = width - (PALETTE_WIDTH if palette else 0)
        if palette and room < 40:  # on a tiny terminal the step keys matter more
            palette, room = None, width
        return fit(self._keys, room), palette

    def render(self) -> Text:
        width = self.size.width
        kept, palette = self._layout(width)
        key_style = self.get_component_rich_style("tutor-footer--key")
        description_style = self.get_component_rich_style("tutor-footer--description")
        hover_style = self.get_component_rich_style("tutor-footer--hover")
        line = Text(no_wrap=True, end="")
        self._places = []

        def add(key: Key) -> None:
            start = len(line)
            line.append(key.display, key_style)
            if key.description:
                line.append(" " + key.description, description_style)
            if not key.enabled:
                line.stylize(Style(dim=True), start)
            if key == self._hovered:
                line.stylize(hover_style, start)
            self._places.append((start, len(line), key))

        for key in kept:
            add(key)
            line.append(" ")
        if palette is not None:
            label = len(palette.display) + 1 + len(palette.description)
            line.append(" " * max(0, width - len(line) - label - 2))
            line.append(EDGE, self.get_component_rich_style("tutor-footer--edge"))
            add(palette)
            line.append(" ")
        line.truncate(width, pad=True)
        return line

    def _key_at(self, x: int) -> Key | None:
        return next((key for start, end, key in self._places if start <= x < end), None)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        key = self._key_at(event.x)
        if key != self._hovered:
            self._hovered = key
            self.tooltip = key.tooltip or key.description if key else None
            self.refresh()

    def on_leave(self) -> None:
        if self._hovered is not None:
            self._hovered = None
            self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self._key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()
