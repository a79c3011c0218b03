"""Pantheon scheme labels and this project's canonical scheme names, kept as plain data.

Archives from a decade of Pantheon use labels that were later renamed (`default_tcp` became
`cubic` on 2018-05-01, spec §1.3).  Everything downstream (targets, the scheme registry, the
objective) speaks canonical names; targets keep the original label next to it so nothing is lost.
The scheme registry builds on SCHEME_ALIASES; add a line here, never a rename elsewhere.
"""

from __future__ import annotations

# Pantheon label -> canonical name.  Only labels whose canonical name differs are listed;
# every other label (vegas, copa, ledbat, saturator, bbr, pcc, verus, sprout, scream, webrtc,
# koho_cc, greg_saturator, taova, vivace, fillp, indigo, ...) is its own canonical name.
SCHEME_ALIASES: dict[str, str] = {
    "default_tcp": "cubic",  # Linux TCP Cubic, renamed in Pantheon's config.yml in May 2018
    "tcp_cubic": "cubic",
    "quic": "quic-cubic",  # proto-quic with Cubic; our QUIC scheme is named by its congestion control
    "quic_cubic": "quic-cubic",
    "tcp_vegas": "vegas",
    "tcp_bbr": "bbr",
    "pcc_allegro": "pcc",
}


def canonical_scheme(label: str) -> str:
    """The canonical name for a Pantheon scheme label (labels are case-sensitive in Pantheon,
    but a table typed in by hand may capitalize them, so matching ignores case)."""
    key = label.strip()
    return SCHEME_ALIASES.get(key, SCHEME_ALIASES.get(key.lower(), key.lower()))


def labels_for(canonical: str) -> list[str]:
    """Every known Pantheon label that maps to `canonical` (including itself)."""
    return [canonical] + [label for label, name in SCHEME_ALIASES.items() if name == canonical]
