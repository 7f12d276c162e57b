#!/usr/bin/perl
# sql-replay.pl: the replayable part of the install script, for an upgrade
# script (docs/operations.md, "Releases and upgrades").
#
#   perl scripts/sql-replay.pl sql/src/*.sql > replay.sql
#
# Reads the install-script parts in the order given and prints, in that
# order, every statement that can be run again over an older version's
# objects and leave them exactly as a fresh install makes them:
#
#   CREATE FUNCTION / PROCEDURE     as CREATE OR REPLACE
#   CREATE VIEW                     as CREATE OR REPLACE VIEW
#   CREATE TRIGGER                  as CREATE OR REPLACE TRIGGER
#   CREATE POLICY p ON t            preceded by DROP POLICY IF EXISTS p ON t
#   ALTER TABLE t ENABLE|DISABLE|FORCE|NO FORCE ...   (trigger firing, RLS)
#   ALTER FUNCTION, COMMENT ON, GRANT, REVOKE
#   SELECT pg_catalog.pg_extension_config_dump(...)
#   DO $roles$ ... $roles$, DO $replay$ ... $replay$   (idempotent by contract)
#
# Everything else (tables, columns, indexes, types, sequences, constraints,
# rows, other DO blocks and SELECTs) is state, not definition: it is not
# printed, and the hand-written head of the upgrade script
# (sql/upgrade/A--B.sql) must bring it from A to B.  The upgrade suite
# (test/suites/upgrade.sh) compares the catalog an upgrade leaves with a
# fresh install's, so a forgotten step fails loudly.
#
# The lexer knows what splits statements in these files: ';' outside
# single-quoted strings, double-quoted identifiers, dollar quotes, -- and
# /* */ comments.  psql meta-commands (a line starting with a backslash)
# are dropped.
use strict;
use warnings;

my @out;

sub classify {
	my ($stmt) = @_;
	(my $s = $stmt) =~ s/^\s+//;
	my $head = uc(substr($s, 0, 200));
	$head =~ s/\s+/ /g;

	return "CREATE OR REPLACE $1$2" if $s =~ /^CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE)(\s.*)$/si;
	return "CREATE OR REPLACE VIEW$1" if $s =~ /^CREATE\s+(?:OR\s+REPLACE\s+)?VIEW(\s.*)$/si;
	return "CREATE OR REPLACE TRIGGER$1" if $s =~ /^CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER(\s.*)$/si;
	if ($s =~ /^CREATE\s+POLICY\s+(\S+)\s+ON\s+(\S+)/si) {
		return "DROP POLICY IF EXISTS $1 ON $2;\n$s";
	}
	return $s if $head =~ /^ALTER TABLE (?:ONLY )?\S+ (?:ENABLE|DISABLE|FORCE|NO FORCE) /;
	return $s if $head =~ /^(?:ALTER FUNCTION|ALTER PROCEDURE|COMMENT ON|GRANT|REVOKE) /;
	return $s if $head =~ /^SELECT PG_CATALOG\.PG_EXTENSION_CONFIG_DUMP\(/;
	return $s if $s =~ /^DO\s+\$(?:roles|replay)\$/;
	return undef;
}

for my $file (@ARGV) {
	open(my $fh, '<', $file) or die "sql-replay.pl: could not open \"$file\": $!\n";
	my $text = do { local $/; <$fh> };
	close($fh);
	# psql meta-commands are whole lines.
	$text =~ s/^\\[^\n]*\n//mg;

	my $stmt = '';
	my $emitted = 0;
	pos($text) = 0;
	while (pos($text) < length($text)) {
		if ($text =~ /\G(--[^\n]*)/gc || $text =~ m{\G(/\*.*?\*/)}gcs) {
			# Comments before a statement's first token are not part of it.
			my $c = $1;
			$stmt .= $c if $stmt =~ /\S/;
		} elsif ($text =~ /\G('[^']*(?:''[^']*)*')/gc || $text =~ /\G("[^"]*(?:""[^"]*)*")/gc) {
			$stmt .= $1;
		} elsif ($text =~ /\G(\$(?:[A-Za-z_][A-Za-z_0-9]*)?\$)/gc) {
			my $tag = $1;
			my $from = pos($text);
			my $end = index($text, $tag, $from);
			die "sql-replay.pl: $file: unterminated dollar quote $tag\n" if $end < 0;
			$stmt .= $tag . substr($text, $from, $end + length($tag) - $from);
			pos($text) = $end + length($tag);
		} elsif ($text =~ /\G;/gc) {
			my $r = classify($stmt);
			if (defined $r) {
				push @out, "-- from $file\n" unless $emitted++;
				push @out, "$r;\n";
			}
			$stmt = '';
		} elsif ($text =~ /\G([^-\/'"\$;]+|.)/gcs) {
			$stmt .= $1;
		}
	}
	die "sql-replay.pl: $file: statement without a closing semicolon\n" if $stmt =~ /\S/;
}
print @out;
