"""The tidegate command: what-if commands, the simulator, the demo."""
