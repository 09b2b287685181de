"""What an import says it did: `ImportReport`, returned by every import and printed by `creditlens import`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ImportReport:
    run: str
    format: str
    records: int
    tokens: int
    seconds: float
    already_imported: bool = False
    tokenization: str = "ids"
    skipped: int = 0
    """Records already in the run (by record key), not added again."""
    unscorable: int = 0
    """Rollouts imported without a score on any channel."""
    notes: list[str] = field(default_factory=list)
    """What the reader decided: which columns became channels and which meta, how groups were formed."""

    def message(self) -> str:
        if self.already_imported:
            return f"{self.run}: this file was already imported into the run; nothing added"
        if self.records == 0 and self.skipped:
            return f"{self.run}: all {self.skipped} records are already in the run; nothing added"
        how = {
            "ids": "token ids from the file",
            "simple": "no token ids and no --model: simple tokenization (words and punctuation, see "
            "docs/importing.md)",
        }.get(self.tokenization, f"re-tokenized with {self.tokenization}")
        lines = [
            f"{self.run}: imported {self.records} rollouts, {self.tokens} tokens ({self.format} format; "
            f"{how}) in {self.seconds:.2f} s"
        ]
        if self.skipped:
            lines.append(f"  skipped {self.skipped} records already in the run")
        if self.unscorable:
            lines.append(
                f"  {self.unscorable} rollouts have no score on any channel (unscorable: left out "
                "of group statistics, advantage 0)"
            )
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)
