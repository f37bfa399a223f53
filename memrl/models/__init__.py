"""Pure torch networks and the RLModules (and model settings) that wrap them for RLlib."""
