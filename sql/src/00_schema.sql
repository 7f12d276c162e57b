-- sandbox_ext install script, part 00: the schema's comment and defaults.
-- Parts are applied in file-name order; see the Makefile.

\echo Use "CREATE EXTENSION sandbox_ext" to load this file. \quit

COMMENT ON SCHEMA agent IS 'sandbox_ext: approval-gated, billed, audited code execution for AI agents';
