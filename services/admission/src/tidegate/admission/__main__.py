"""Entry point: ``python -m tidegate.admission`` or the ``tidegate-admission`` script."""

from tidegate.admission.app import setup
from tidegate.admission.config import Settings
from tidegate.runtime import run_service


def main() -> None:
    """Run the admission service until SIGTERM (settings from env and TIDEGATE_CONFIG)."""
    run_service("admission", Settings, setup)


if __name__ == "__main__":
    main()
