"""Evidence at the bottom layer: the performance log (logs), table formatting (tables), built-file provenance,
ROUTE_COUNTERS' rule (counters)."""
