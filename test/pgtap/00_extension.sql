-- The extension's footprint: schema, settings.
BEGIN;
SELECT plan(3);
SELECT has_schema('agent', 'schema agent exists');
SELECT has_extension('sandbox_ext', 'sandbox_ext is installed');
SELECT throws_ok($$SET LOCAL sandbox.org_id = 'x'$$, '22P02', NULL,
				 'a malformed tenant id is refused');
SELECT * FROM finish();
ROLLBACK;
