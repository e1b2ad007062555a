"""The Hugging Face Hub, seen from here: is it reachable?

Pages and the lab load pretrained models only where the Hub answers (Colab
does); elsewhere, as on the machine that builds the book, they say so and
skip.  No torch needed to ask.
"""

from __future__ import annotations

import os
import socket

from .checks import positive


def reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers (and offline mode is not set): a quick check, not a download.

    Colab says yes; the machine that builds the book says no, and pages then skip their Hub cells.
    """
    timeout = positive("timeout", timeout)
    if any(os.environ.get(flag, "0") not in ("", "0") for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False
