"""Entry point: ``python -m tidegate.ungater`` or the ``tidegate-ungater`` script."""

from tidegate.runtime import run_service
from tidegate.ungater.app import setup
from tidegate.ungater.config import UngaterSettings


def main() -> None:
    """Run the ungater until SIGTERM (settings from env and TIDEGATE_CONFIG)."""
    run_service("ungater", UngaterSettings, setup)


if __name__ == "__main__":
    main()
