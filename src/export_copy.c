/*-------------------------------------------------------------------------
 *
 * export_copy.c
 *		The copy phase of the ClickHouse export: the exported tables sent
 *		page by page below the slot's consistent point, after the slot is
 *		created (initial export), after agent.export_resync(), or for a
 *		table agent.export_setup() added to the publication.  The design
 *		(why version C - 1, why re-sending a page is harmless) is in
 *		export_stream.c's header; a round calls sandbox_export_copy_page()
 *		instead of streaming while a copy is pending.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "exporter.h"
#include "sandbox_ext.h"

/*
 * Note a copied page of table t: move the cursor to (last, last_seq); after
 * its last page the copy moves on to the next table, and ends after the
 * last table.
 */
static void
record_copy_progress(ExportObjects *o, ExportTable t, const char *last, int32 last_seq,
					 uint64 n, bool done)
{
	Oid			types[6] = {TEXTOID, TEXTOID, UUIDOID, INT4OID, BOOLOID, INT8OID};
	Datum		vals[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	vals[0] = sandbox_export_slot_name_datum();
	vals[1] = CStringGetTextDatum(sandbox_export_relname(t));
	nulls[2] = n > 0 ? ' ' : 'n';
	vals[2] = n > 0 ? DirectFunctionCall1(uuid_in, CStringGetDatum(last)) : (Datum) 0;
	nulls[3] = n > 0 && t == EXPORT_EGRESS_CONNECTIONS ? ' ' : 'n';
	vals[3] = Int32GetDatum(last_seq);
	vals[4] = BoolGetDatum(done);
	vals[5] = Int64GetDatum((int64) n);
	sandbox_xact_begin("recording copy progress");
	if (o->catalog_0_1)
	{
		/* 0.1.0's step: (slot, last, done, rows) */
		Oid			old_types[4] = {TEXTOID, UUIDOID, BOOLOID, INT8OID};
		Datum		old_vals[4] = {vals[0], vals[2], vals[4], vals[5]};
		char		old_nulls[4] = {' ', nulls[2], ' ', ' '};

		sandbox_export_spi_exec("SELECT agent._export_copy_progress($1, $2, $3, $4)", 4, old_types, old_vals,
				 old_nulls, SPI_OK_SELECT);
	}
	else
		sandbox_export_spi_exec("SELECT agent._export_copy_progress($1, $2, $3, $4, $5, $6)", 6, types, vals, nulls,
				 SPI_OK_SELECT);
	sandbox_xact_commit();
	if (done)
		ereport(LOG,
				(errmsg("ClickHouse export: copy of agent.%s for slot \"%s\" finished",
						sandbox_export_relname(t), sandbox_export_slot)));
}

/*
 * One page of the tables' copy (initial export, resync, or a table added
 * to the publication).  Pages are keyed on the table's primary key
 * (invocation_id; invocation_id and seq), each read in its own short
 * transaction; every row goes out with version copy_lsn - 1, so whatever
 * the slot streams later (version >= copy_lsn) wins, and re-sending a page
 * after a crash is harmless.  Rows are read with the types' output
 * functions, the same text pgoutput sends, so one conversion serves both
 * paths.
 */
StepResult
sandbox_export_copy_page(ExportObjects *o, ExportBatch *b)
{
	ExportTable tab = o->copy_table;
	Oid			types[3] = {UUIDOID, INT4OID, INT4OID};
	Datum		vals[3];
	char		nulls[3] = {' ', ' ', ' '};
	uint64		n;
	uint64		i;
	char		last[40] = "";
	int32		last_seq = 0;
	int			ncols = sandbox_export_ncolumns(tab);
	int			att[EXPORT_MAX_COLUMNS];
	int			seq_att = 0;
	StepResult	r;
	int			j;

	sandbox_export_batch_reset(b, InvalidXLogRecPtr);
	if (o->has_copy_after)
		vals[0] = DirectFunctionCall1(uuid_in, CStringGetDatum(o->copy_after));
	else
	{
		vals[0] = (Datum) 0;
		nulls[0] = 'n';
	}
	vals[1] = Int32GetDatum(o->copy_after_seq);
	vals[2] = Int32GetDatum(sandbox_export_batch_rows);

	sandbox_xact_begin("copying an exported table");
	if (tab == EXPORT_EGRESS_CONNECTIONS)
		sandbox_export_spi_exec("SELECT * FROM agent._export_copy_egress_page($1, $2, $3)", 3, types, vals, nulls,
				 SPI_OK_SELECT);
	else
	{
		Oid			ti_types[2] = {UUIDOID, INT4OID};
		Datum		ti_vals[2] = {vals[0], vals[2]};
		char		ti_nulls[2] = {nulls[0], ' '};

		sandbox_export_spi_exec("SELECT * FROM agent._export_copy_page($1, $2)", 2, ti_types, ti_vals, ti_nulls,
				 SPI_OK_SELECT);
	}
	/* The columns the export sends, by name (pgoutput.c's lists are the one list). */
	for (j = 0; j < ncols; j++)
	{
		if ((att[j] = SPI_fnumber(SPI_tuptable->tupdesc, sandbox_export_column(tab, j))) <= 0)
			elog(ERROR, "agent.%s has no column \"%s\"",
				 sandbox_export_relname(tab), sandbox_export_column(tab, j));
		if (strcmp(sandbox_export_column(tab, j), "seq") == 0)
			seq_att = att[j];
	}
	n = SPI_processed;
	for (i = 0; i < n; i++)
	{
		char	   *row[EXPORT_MAX_COLUMNS];

		for (j = 0; j < ncols; j++)
			row[j] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, att[j]);
		sandbox_export_append_row(b, tab, row, false, o->copy_lsn - 1);
		if (i == n - 1)
		{
			strlcpy(last, row[2], sizeof(last));	/* invocation_id */
			if (seq_att > 0)
				last_seq = pg_strtoint32(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
													  seq_att));
		}
	}
	sandbox_xact_commit();

	if (n > 0)
	{
		sandbox_export_set_state(SANDBOX_EXPORT_EXPORTING);
		r = sandbox_export_send_rows(b);
		if (r != STEP_MORE)
			return r;
		sandbox_export_note_success(n);
	}
	record_copy_progress(o, tab, last, last_seq, n, n < (uint64) sandbox_export_batch_rows);
	return STEP_MORE;
}
