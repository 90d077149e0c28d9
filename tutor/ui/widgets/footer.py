"""The key bar, fitted to the terminal: whole keys only, the least needed left out first.

Textual's Footer lays every key out in one row and clips what does not fit, so a narrow
terminal showed half a key ("K" of "Keys"). This one leaves keys out, in `DROP_ORDER`, until
the rest fits; every key stays listed in the help screen (F9).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

# Actions whose keys go first when space runs short (the rest keep their places).
DROP_ORDER = ("previous_step", "explain", "scratch", "next_step", "toggle_view", "reset_code",
              "steps", "help", "back", "reveal", "hint")
PALETTE_WIDTH = 12  # "▏^p palette" with its margin


def _width(key: FooterKey) -> int:
    # Compact style: the key, a space, the description, one column of margin.
    return len(key.key_display) + (1 + len(key.description) if key.description else 0) + 1


def fit(keys: list[FooterKey], room: int) -> list[FooterKey]:
    """The keys to show in `room` columns, in their own order."""
    kept = list(keys)
    rank = {action: i for i, action in enumerate(DROP_ORDER)}
    while kept and sum(_width(k) for k in kept) > room:
        droppable = [k for k in kept if k.action in rank]
        victim = (min(droppable, key=lambda k: rank[k.action]) if droppable else kept[-1])
        kept.remove(victim)
    return kept


class TutorFooter(Footer):
    """A compact footer that shows only keys that fit completely."""

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._laid_out_for = 0
        self._shown: tuple | None = None  # the keys, and which were enabled, last composed

    def bindings_changed(self, screen: Screen) -> None:
        # The screen refreshes its bindings after every check; building the keys again costs
        # more than the verdict itself, so it happens only when what they show changed.
        shown = self._signature(screen)
        if shown == self._shown and self._bindings_ready:
            return
        super().bindings_changed(screen)

    @staticmethod
    def _signature(screen: Screen) -> tuple:
        return tuple((binding.action, binding.key, enabled, tooltip)
                     for _, binding, enabled, tooltip in screen.active_bindings.values()
                     if binding.show)

    def compose(self) -> ComposeResult:
        widgets = list(super().compose())
        palette = [w for w in widgets if w.has_class("-command-palette")]
        keys = [w for w in widgets if isinstance(w, FooterKey) and w not in palette]
        width = self.app.size.width
        room = width - (PALETTE_WIDTH if palette else 0)
        if palette and room < 40:  # on a tiny terminal the step keys matter more
            palette, room = [], width
        self._laid_out_for = width
        self._shown = self._signature(self.screen) if self._bindings_ready else None
        kept = set(fit(keys, room))
        yield from (w for w in widgets if w in kept or w in palette
                    or not isinstance(w, FooterKey))

    def on_resize(self) -> None:
        if self.app.size.width != self._laid_out_for and self._bindings_ready:
            self.call_after_refresh(self.recompose)
