"""The torch function library: every public function jitgrad publishes beside the engine, grouped by
family.  Imports jitgrad.runtime (the engine), never the reverse."""
