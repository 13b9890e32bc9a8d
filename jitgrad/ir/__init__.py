"""The vocabulary: dtypes, primitives (OpDefs) and, later, the SSA graph.  Imports nothing else of jitgrad."""
