"""toc.py and ddl.py: archive listings, post-data targets, data files, formats.

Golden files in tests/golden/toc/:
  captured_*   verbatim output of PostgreSQL 15 pg_restore on archives of
               SAMPLE_SQL (made by make_archives below); *.stderr is what
               pg_restore -l says about a text file.
  handwritten_* written for these tests: malformed and edited listings, and
               a listing in the style of newer versions (compression names,
               BLOB METADATA / LARGE OBJECTS items).
  *.expected.json  the reviewed parse of a captured file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgparmon.cluster import Cluster, ClusterError, find_bindir, start_cluster
from pgparmon.ddl import (
    KEY_COSTS,
    KEY_EXTRA_COLUMN,
    PostDataTarget,
    column_types,
    key_class,
    key_columns,
    key_costs,
    link_targets,
    parse_post_data_sql,
    post_data_targets,
)
from pgparmon.toc import (
    TocError,
    TocItem,
    archive_format,
    data_file,
    data_file_id,
    list_archive,
    parse_archive_listing,
    parse_listing,
    run_pg_restore,
)

GOLDEN = Path(__file__).parent / "golden" / "toc"

SAMPLE_SQL = r'''
CREATE SCHEMA "my schema";
CREATE TABLE parent (id serial PRIMARY KEY, code text UNIQUE, n int CHECK (n > 0));
CREATE TABLE child (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    parent_id int REFERENCES parent(id), v text);
CREATE INDEX child_v_idx ON child (v);
CREATE UNIQUE INDEX child_v_uidx ON child (v, id);
COMMENT ON INDEX child_v_idx IS 'an index comment';
CREATE SEQUENCE standalone_seq;
CREATE TABLE "my schema"."odd ""table""" (a int PRIMARY KEY, b text, p int);
CREATE INDEX "odd idx" ON "my schema"."odd ""table""" (b);
ALTER TABLE "my schema"."odd ""table""" ADD CONSTRAINT "odd check" CHECK (a > 0) NOT VALID;
ALTER TABLE "my schema"."odd ""table""" ADD CONSTRAINT "odd fk" FOREIGN KEY (p)
    REFERENCES parent(id) DEFERRABLE;
ALTER TABLE child ADD CONSTRAINT child_odd_fk FOREIGN KEY (parent_id)
    REFERENCES "my schema"."odd ""table"""(a) ON DELETE CASCADE NOT VALID;
CREATE VIEW v_parent AS SELECT * FROM parent;
CREATE MATERIALIZED VIEW mv_child AS SELECT parent_id, count(*) FROM child GROUP BY 1;
CREATE INDEX mv_idx ON mv_child (parent_id);
CREATE FUNCTION trg() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER child_trg BEFORE INSERT ON child FOR EACH ROW EXECUTE FUNCTION trg();
CREATE CONSTRAINT TRIGGER child_ctrg AFTER UPDATE OF v ON child DEFERRABLE
    FOR EACH ROW EXECUTE FUNCTION trg();
CREATE RULE r_noop AS ON DELETE TO parent DO INSTEAD NOTHING;
CREATE TABLE ex (r int4range, EXCLUDE USING gist (r WITH &&));
CREATE TABLE meas (id int, d date, v int) PARTITION BY RANGE (d);
CREATE TABLE meas_2024 PARTITION OF meas FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE INDEX meas_d_idx ON meas (d);
ALTER TABLE meas ADD CONSTRAINT meas_pk PRIMARY KEY (id, d);
CREATE POLICY p_parent ON parent USING (n > 0);
ALTER TABLE parent ENABLE ROW LEVEL SECURITY;
CREATE STATISTICS child_stats ON parent_id, v FROM child;
CREATE PUBLICATION pub FOR TABLE parent;
CREATE FUNCTION evt() RETURNS event_trigger LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE EVENT TRIGGER evt_trg ON ddl_command_end EXECUTE FUNCTION evt();
CREATE TABLE "Owned" (x int);
ALTER TABLE "Owned" OWNER TO "odd owner";
COMMENT ON TABLE parent IS 'parent table';
INSERT INTO parent (code, n) SELECT 'c'||g, g FROM generate_series(1,100) g;
INSERT INTO "my schema"."odd ""table""" SELECT g, 'x', 1 FROM generate_series(1,10) g;
INSERT INTO child (parent_id, v) SELECT (g%10)+1, 'v'||g FROM generate_series(1,1000) g;
INSERT INTO meas VALUES (1, '2024-03-01', 1);
REFRESH MATERIALIZED VIEW mv_child;
SELECT lo_from_bytea(0, 'hello');
GRANT SELECT ON parent TO PUBLIC;
'''


def golden(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


def by_id(items: list[TocItem]) -> dict[int, TocItem]:
    return {it.dump_id: it for it in items}


def shape(items: list[TocItem]) -> list[tuple[str, str | None, str, str | None]]:
    """An item list without ids and oids, which change between clusters."""
    return [(it.desc, it.schema, it.tag, it.owner) for it in items]


# ------------------------------------------------------------- listings


def test_captured_directory_listing_header() -> None:
    header, items = parse_archive_listing(golden("captured_pg15_directory.list"))
    assert header.dbname == "tiny"
    assert header.format == "directory"
    assert header.compression == "-1"  # <= 15 prints the gzip level, -1 = default
    assert header.dumped_from and header.dumped_from.startswith("15.")
    assert header.dumped_by and header.dumped_by.startswith("15.")
    assert header.toc_entries == 65
    assert header.archive_version == "1.14-0"
    assert header.created_at and header.created_at.endswith("UTC")
    assert header.malformed_lines == 0
    # TOC Entries also counts ENCODING, STDSTRINGS, SEARCHPATH, DATABASE: -l hides them
    assert len(items) == 61


def test_captured_listing_names_with_spaces_and_quotes() -> None:
    items = parse_listing(golden("captured_pg15_directory.list"))
    found = {(it.desc, it.tag): it for it in items}
    schema = found[("SCHEMA", "my schema")]
    assert (schema.schema, schema.owner, schema.catalog_oid) == (None, "postgres", 2615)
    data = found[("TABLE DATA", 'odd "table"')]
    assert (data.schema, data.catalog_oid, data.is_data) == ("my schema", 0, True)
    assert data.relation == 'my schema.odd "table"'
    pk = found[("CONSTRAINT", 'odd "table" odd "table"_pkey')]
    assert pk.schema == "my schema" and pk.relation is None
    assert found[("CHECK CONSTRAINT", 'odd "table" odd check')].schema == "my schema"
    assert found[("FK CONSTRAINT", "child child_odd_fk")].schema == "public"
    assert found[("INDEX", "odd idx")].schema == "my schema"


def test_captured_listing_descs_with_spaces() -> None:
    descs = {it.desc for it in parse_listing(golden("captured_pg15_directory.list"))}
    assert {"TABLE DATA", "FK CONSTRAINT", "SEQUENCE SET", "SEQUENCE OWNED BY",
            "MATERIALIZED VIEW DATA", "MATERIALIZED VIEW", "CHECK CONSTRAINT", "INDEX ATTACH",
            "TABLE ATTACH", "ROW SECURITY", "PUBLICATION TABLE", "EVENT TRIGGER"} <= descs


def test_listing_of_some_kinds_only() -> None:
    """descs: the items of those kinds, the same as filtering the whole list
    (a dump of thousands of tables keeps its TABLE DATA entries only)."""
    text = golden("captured_pg15_directory.list")
    whole = parse_listing(text)
    header, data = parse_archive_listing(text, descs=("TABLE DATA",))
    assert data == [it for it in whole if it.desc == "TABLE DATA"] and data
    assert header.malformed_lines == 0
    _, two = parse_archive_listing(text, descs=("TABLE DATA", "FK CONSTRAINT"))
    assert two == [it for it in whole if it.desc in ("TABLE DATA", "FK CONSTRAINT")]


def test_captured_listing_blobs_has_empty_owner() -> None:
    text = golden("captured_pg15_directory.list")
    assert "BLOBS - BLOBS \n" in text  # real output: trailing space, no owner
    blobs = [it for it in parse_listing(text) if it.desc == "BLOBS"]
    assert len(blobs) == 1
    assert (blobs[0].schema, blobs[0].tag, blobs[0].owner, blobs[0].is_data) == (
        None, "BLOBS", None, True)


def test_is_data_and_relation() -> None:
    items = parse_listing(golden("captured_pg15_directory.list"))
    data = sorted(it.relation or it.tag for it in items if it.is_data)
    assert data == ["BLOBS", 'my schema.odd "table"', "public.Owned odd", "public.child",
                    "public.ex", "public.meas_2024", "public.parent"]
    mv = next(it for it in items if it.desc == "MATERIALIZED VIEW DATA")
    assert not mv.is_data and mv.relation == "public.mv_child"
    seq = next(it for it in items if it.desc == "SEQUENCE SET")
    assert not seq.is_data and seq.relation is None


def test_owner_with_space_needs_known_owners() -> None:
    text = golden("captured_pg15_directory.list")
    # "TABLE public Owned odd owner": without help the split is ambiguous
    naive = next(it for it in parse_listing(text) if it.oid and it.tag.startswith("Owned"))
    assert (naive.tag, naive.owner) == ("Owned odd", "owner")
    told = [it for it in parse_listing(text, owners=["odd owner", "postgres"])
            if it.tag == "Owned"]
    assert {(it.desc, it.owner) for it in told} == {("TABLE", "odd owner"),
                                                    ("TABLE DATA", "odd owner")}


def test_custom_and_directory_listings_agree() -> None:
    hd, d = parse_archive_listing(golden("captured_pg15_directory.list"))
    hc, c = parse_archive_listing(golden("captured_pg15_custom.list"))
    assert d == c
    assert (hd.format, hc.format) == ("directory", "custom")


def test_malformed_lines_are_skipped_and_counted() -> None:
    header, items = parse_archive_listing(golden("handwritten_malformed.list"))
    assert header.malformed_lines == 4
    assert [it.dump_id for it in items] == [3383, 3385, 3391]


def test_edited_use_list_without_header() -> None:
    text = golden("handwritten_edited_use_list.list")
    header, items = parse_archive_listing(text.replace("\n", "\r\n"))
    assert header.dbname is None and header.malformed_lines == 0
    assert [it.dump_id for it in items] == [3385, 3229]  # ';'-commented lines are skipped
    assert items[1].tag == "child child_pkey"


def test_newer_version_style_listing() -> None:
    header, items = parse_archive_listing(golden("handwritten_pg17_style.list"))
    assert header.compression == "gzip"
    ids = by_id(items)
    assert ids[4501].desc == "BLOB METADATA" and ids[4501].tag == "16384..16385"
    assert ids[4502].desc == "BLOBS" and ids[4502].is_data
    assert ids[4503].desc == "LARGE OBJECTS" and ids[4503].is_data
    assert ids[4504].desc == "STATISTICS DATA" and ids[4504].tag == "big"
    # a desc this module has never heard of: upper-case words before the schema
    assert (ids[4505].desc, ids[4505].schema, ids[4505].tag) == ("NEW THING", "public", "x")


def test_catalog_oid_settles_desc_prefixes() -> None:
    # a TABLE in a schema named DATA, its data, a DEFAULT in a schema named ACL
    text = ("216; 1259 16388 TABLE DATA weird postgres\n"
            "3417; 0 16388 TABLE DATA DATA weird postgres\n"
            "3236; 2604 16391 DEFAULT ACL acl_tbl id postgres\n")
    t, d, dflt = parse_listing(text)
    assert (t.desc, t.schema, t.tag, t.relation) == ("TABLE", "DATA", "weird", "DATA.weird")
    assert (d.desc, d.schema, d.tag, d.relation) == ("TABLE DATA", "DATA", "weird", "DATA.weird")
    assert (dflt.desc, dflt.schema, dflt.tag) == ("DEFAULT", "ACL", "acl_tbl id")


def test_odd_line_breaks_inside_names() -> None:
    # pg_dump turns only \n and \r into spaces; other separators stay in names
    text = "220; 1259 16415 TABLE public a\u2028b\x0cc postgres\n"
    (item,) = parse_listing(text)
    assert item.tag == "a\u2028b\x0cc"


def test_known_schemas_parameter() -> None:
    line = '3421; 0 16415 TABLE DATA my schema odd "table" postgres\n'
    assert parse_listing(line)[0].schema == "my"
    assert parse_listing(line, schemas=["my schema"])[0].tag == 'odd "table"'


@pytest.mark.parametrize("text", [
    "", "   \n\n", "\x00\x01PGDMP\x00garbage", "hello world\nthis is not a listing\n",
    "pg_restore: error: input file does not appear to be a valid archive (too short?)\n",
])
def test_not_a_listing(text: str) -> None:
    with pytest.raises(TocError) as exc:
        parse_archive_listing(text)
    assert "\n" not in str(exc.value)


def test_captured_error_message_is_not_a_listing() -> None:
    stderr = golden("captured_pg15_not_an_archive.stderr")
    with pytest.raises(TocError, match="does not appear to be a valid archive"):
        parse_listing(stderr)


def test_garbage_file_is_not_a_listing() -> None:
    with pytest.raises(TocError, match="not a pg_restore -l listing"):
        parse_listing(golden("handwritten_garbage.txt"))


# ------------------------------------------------------- post-data SQL


def target_json(t: PostDataTarget) -> dict[str, object]:
    d = dataclasses.asdict(t)
    d["dependencies"] = list(t.dependencies)
    d["key"] = None if t.key is None else list(t.key)
    return d


def test_post_data_verbose_matches_expected() -> None:
    got = [target_json(t) for t in parse_post_data_sql(
        golden("captured_pg15_postdata_verbose.sql"))]
    want = json.loads(golden("captured_pg15_postdata_verbose.expected.json"))
    assert got == want


def test_post_data_kinds_and_tables() -> None:
    parsed = parse_post_data_sql(golden("captured_pg15_postdata_verbose.sql"))
    ts = {t.name: t for t in parsed if t.desc != "INDEX ATTACH"}  # same tag as its index
    assert ts['odd "table" odd "table"_pkey'].table == 'my schema.odd "table"'
    assert ts['odd "table" odd "table"_pkey'].kind == "primary key"
    assert ts["parent parent_code_key"].kind == "unique"
    assert ts["ex ex_r_excl"].kind == "exclusion"
    assert ts['odd "table" odd check'].kind == "check"
    fk = ts["child child_odd_fk"]
    assert (fk.kind, fk.table, fk.references) == ("foreign key", "public.child",
                                                  'my schema.odd "table"')
    assert (fk.dump_id, fk.dependencies) == (3262, (218, 3248, 220))
    assert ts["odd idx"].table == 'my schema.odd "table"'
    assert ts["meas_d_idx"].table == "public.meas"  # CREATE INDEX ... ON ONLY
    assert ts["child child_ctrg"].kind == "trigger" and ts["child child_ctrg"].table == (
        "public.child")
    assert ts["evt_trg"].kind == "trigger" and ts["evt_trg"].table is None
    assert ts["parent r_noop"].table == "public.parent"
    assert ts["mv_child"].table == "public.mv_child"
    assert ts["meas_2024_d_idx"].table == "public.meas_2024"


def test_post_data_plain_links_by_name() -> None:
    plain = parse_post_data_sql(golden("captured_pg15_postdata_plain.sql"))
    assert plain and all(t.dump_id is None and t.dependencies == () for t in plain)
    items = parse_listing(golden("captured_pg15_custom.list"))
    linked = link_targets(plain, items)
    verbose = link_targets(parse_post_data_sql(golden("captured_pg15_postdata_verbose.sql")),
                           ())
    strip = {k: (v.desc, v.table, v.references, v.kind) for k, v in verbose.items()}
    assert {k: (v.desc, v.table, v.references, v.kind) for k, v in linked.items()} == strip


def test_post_data_keys_match_listing_items() -> None:
    items = by_id(parse_listing(golden("captured_pg15_directory.list")))
    targets = link_targets(parse_post_data_sql(golden("captured_pg15_postdata_verbose.sql")), ())
    for dump_id, t in targets.items():
        assert (items[dump_id].desc, items[dump_id].schema, items[dump_id].tag) == (
            t.desc, t.schema, t.name)


def test_post_data_statement_forms() -> None:
    sql = """
--
-- Name: t t_fk; Type: FK CONSTRAINT; Schema: s; Owner: -
--

ALTER TABLE ONLY "S"."T"
    ADD CONSTRAINT t_fk FOREIGN KEY (a) REFERENCES other(id) ON DELETE SET NULL;


--
-- Name: ix; Type: INDEX; Schema: s; Owner: o; Tablespace: fast
--

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ix ON t USING btree (lower(("x;y")::text));


--
-- Name: t t_chk; Type: CONSTRAINT; Schema: s; Owner: o
--

ALTER TABLE s.t
    ADD CONSTRAINT t_chk CHECK ((note <> ';'::text));
"""
    fk, ix, chk = parse_post_data_sql(sql)
    assert (fk.table, fk.references, fk.kind, fk.schema) == ("S.T", "s.other", "foreign key", "s")
    assert (ix.table, ix.kind, ix.object_name) == ("s.t", "index", "ix")
    assert (chk.table, chk.kind) == ("s.t", "check")


@pytest.mark.parametrize(("sql", "key"), [
    ("CREATE INDEX t_c_idx ON public.t USING btree (c);", ("c",)),
    ("CREATE INDEX t_c_idx ON public.t (c);", ("c",)),
    ('CREATE UNIQUE INDEX x ON ONLY "S".t USING btree (lower(b), "Odd Col" DESC NULLS LAST) '
     "WHERE (a > 1);", (None, "Odd Col")),
    ("CREATE INDEX x ON public.t USING btree (((a + b)));", (None,)),
    ('CREATE INDEX x ON public.t USING btree (b COLLATE "C" text_pattern_ops) INCLUDE (z);',
     ("b",)),
    ("CREATE INDEX x ON public.t USING btree (public.f(a));", (None,)),
    ("CREATE INDEX x ON public.t USING gin (doc);", None),
    ("CREATE INDEX x ON public.t USING hash (a);", None),
    ('ALTER TABLE ONLY public.t\n    ADD CONSTRAINT t_pkey PRIMARY KEY (Id, "b c");',
     ("id", "b c")),
    ("ALTER TABLE ONLY public.t ADD CONSTRAINT u UNIQUE NULLS NOT DISTINCT (email);",
     ("email",)),
    ("ALTER TABLE ONLY public.t ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES public.u(id);",
     None),
    ("ALTER TABLE ONLY public.t ADD CONSTRAINT ex EXCLUDE USING gist (r WITH &&);", None),
    ("CREATE TRIGGER trg AFTER INSERT ON public.t FOR EACH ROW EXECUTE FUNCTION f();", None),
])
def test_key_columns_of_a_btree_build(sql: str, key: tuple[str | None, ...] | None) -> None:
    assert key_columns(sql) == key


def test_column_types_and_their_key_class() -> None:
    types = column_types("""CREATE TABLE public."T" (
    id bigint NOT NULL,
    "Odd, Col" character varying(20) COLLATE pg_catalog."C",
    b text DEFAULT 'x,y'::text NOT NULL,
    c timestamp(3) with time zone,
    d numeric(10,2),
    e integer[],
    f public.citext,
    g double precision GENERATED ALWAYS AS ((id)::double precision) STORED,
    u uuid,
    CONSTRAINT chk CHECK ((id > 0))
);""")
    assert types == {"id": "bigint", "Odd, Col": "character varying", "b": "text",
                     "c": "timestamp with time zone", "d": "numeric", "e": "integer[]",
                     "f": "public.citext", "g": "double precision", "u": "uuid"}
    assert {k: key_class(v) for k, v in types.items()} == {
        "id": "fixed", "Odd, Col": "text", "b": "text", "c": "fixed", "d": "numeric", "e": None,
        "f": "text", "g": "fixed", "u": "fixed"}
    assert column_types("CREATE TABLE public.p PARTITION OF public.q FOR VALUES IN (1);") == {}
    assert key_class(None) is None


def test_full_script_copy_data_is_not_parsed() -> None:
    sql = (
        "--\n-- Data for Name: t; Type: TABLE DATA; Schema: public; Owner: o\n--\n\n"
        "COPY public.t (a) FROM stdin;\n"
        "-- Name: fake; Type: INDEX; Schema: public; Owner: o\n"
        "\\.\n\n\n"
        "--\n-- Name: t_pkey; Type: CONSTRAINT; Schema: public; Owner: o\n--\n\n"
        "ALTER TABLE ONLY public.t\n    ADD CONSTRAINT t_pkey PRIMARY KEY (a);\n")
    data, pk = parse_post_data_sql(sql)
    assert (data.desc, data.name, data.kind) == ("TABLE DATA", "t", "other")
    assert (pk.name, pk.kind, pk.table) == ("t_pkey", "primary key", "public.t")


def test_post_data_garbage_gives_nothing() -> None:
    assert parse_post_data_sql("") == []
    assert parse_post_data_sql("SELECT 1;\n-- just a comment\n") == []


# ------------------------------------------------------ files and formats


def test_data_file_id() -> None:
    assert data_file_id("3349.dat.gz") == 3349
    assert data_file_id(Path("/a/b/12.dat")) == 12
    assert data_file_id("7.dat.lz4") == 7 and data_file_id("8.dat.zst") == 8
    for name in ("toc.dat", "blobs.toc", "blobs_3391.toc", "blob_16443.dat",
                 "blob_16443.dat.gz", "3349.dat.bz2", "x3349.dat", "3349.datx", ""):
        assert data_file_id(name) is None


def test_data_file_prefers_first_existing(tmp_path: Path) -> None:
    (tmp_path / "10.dat.zst").write_bytes(b"x")
    (tmp_path / "11.dat.gz").write_bytes(b"x")
    (tmp_path / "11.dat.lz4").write_bytes(b"x")
    assert data_file(tmp_path, 10) == tmp_path / "10.dat.zst"
    assert data_file(tmp_path, 11) == tmp_path / "11.dat.gz"
    assert data_file(tmp_path, 12) is None
    assert data_file(tmp_path / "missing", 10) is None


def test_archive_format_magic(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert archive_format(tmp_path / "d") is None
    (tmp_path / "d" / "toc.dat").write_bytes(b"PGDMP")
    assert archive_format(tmp_path / "d") == "directory"
    (tmp_path / "c").write_bytes(b"PGDMP\x01\x0e\x00rest")
    assert archive_format(tmp_path / "c") == "custom"
    (tmp_path / "t").write_bytes(b"\0" * 257 + b"ustar\x0000" + b"\0" * 100)
    assert archive_format(tmp_path / "t") == "tar"
    (tmp_path / "p.sql").write_text("--\n-- PostgreSQL database dump\n--\n")
    assert archive_format(tmp_path / "p.sql") == "plain"
    (tmp_path / "x").write_bytes(b"hello")
    assert archive_format(tmp_path / "x") is None
    assert archive_format(tmp_path / "nope") is None


# ------------------------------------------------------ real archives


def make_archives(cl: Cluster, root: str) -> dict[str, str]:
    """Create the sample database in a running cluster and dump it in every
    archive format; returns {"directory"|"custom"|"tar"|"directory_z0": path,
    "root": root}."""
    cl.psql('CREATE ROLE "odd owner"')
    cl.psql("CREATE DATABASE tiny")
    cl.psql(SAMPLE_SQL, dbname="tiny")
    paths = {"root": root}
    formats = {"directory": ["-Fd"], "custom": ["-Fc"], "tar": ["-Ft"],
               "directory_z0": ["-Fd", "-Z", "0"]}
    for key, args in formats.items():
        paths[key] = os.path.join(root, key)
        subprocess.run([cl.client("pg_dump"), *args, "-f", paths[key], "tiny"], env=cl.env(),
                       check=True, capture_output=True, timeout=60)
    return paths


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    try:
        cl = start_cluster(prefix="pgparmon-toc-")
    except ClusterError as exc:
        pytest.skip(f"no PostgreSQL cluster: {exc}")
    try:
        yield make_archives(cl, str(tmp_path_factory.mktemp("archives")))
    finally:
        cl.stop()


@pytest.fixture(scope="module")
def pg_restore(archives: dict[str, str]) -> str:
    return str(find_bindir() / "pg_restore")


@pytest.mark.integration
def test_real_listings(archives: dict[str, str], pg_restore: str) -> None:
    hd, d = list_archive(archives["directory"], pg_restore)
    hc, c = list_archive(archives["custom"], pg_restore)
    ht, t = list_archive(archives["tar"])  # pg_restore found on PATH / /usr/lib/postgresql
    assert (hd.format, hc.format, ht.format) == ("directory", "custom", "tar")
    assert d == c == t
    assert hd.malformed_lines == 0 and hd.dbname == "tiny"
    assert sum(it.is_data for it in d) == 7
    if hd.dumped_by and hd.dumped_by.startswith("15."):
        assert shape(d) == shape(parse_listing(golden("captured_pg15_directory.list")))


@pytest.mark.integration
def test_real_listing_of_some_kinds_reads_only_their_lines(archives: dict[str, str],
                                                          pg_restore: str) -> None:
    """list_archive(descs=...) keeps only the lines that can matter while it
    reads pg_restore's output: the same header and items as parsing the
    whole listing, for every format."""
    for key in ("directory", "custom", "tar"):
        whole = run_pg_restore(["-l"], archives[key], pg_restore, 60)
        for descs in (("TABLE DATA",), ("TABLE DATA", "FK CONSTRAINT"), ("SCHEMA",)):
            assert list_archive(archives[key], pg_restore, descs=descs) == \
                parse_archive_listing(whole, descs=descs), (key, descs)
    assert len(list_archive(archives["custom"], pg_restore, descs=("TABLE DATA",))[1]) == 6


def test_filtered_listing_gives_up_after_its_timeout(tmp_path: Path) -> None:
    """A pg_restore that hangs is killed at the timeout: a one-line TocError."""
    slow = tmp_path / "pg_restore"
    slow.write_text("#!/bin/sh\necho ';'\nexec sleep 30\n")
    slow.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(TocError, match="longer than 0.5 s"):
        list_archive(tmp_path, str(slow), timeout=0.5, descs=("TABLE DATA",))
    assert time.monotonic() - t0 < 10


@pytest.mark.integration
def test_real_data_files(archives: dict[str, str], pg_restore: str) -> None:
    for key, suffix in (("directory", ".dat.gz"), ("directory_z0", ".dat")):
        _, items = list_archive(archives[key], pg_restore)
        table_data = {it.dump_id for it in items if it.desc == "TABLE DATA"}
        for dump_id in table_data:
            f = data_file(archives[key], dump_id)
            assert f is not None and f.name == f"{dump_id}{suffix}"
        ids = {data_file_id(n) for n in os.listdir(archives[key])} - {None}
        assert ids == table_data  # blob files, blobs.toc and toc.dat map to None


@pytest.mark.integration
def test_real_post_data_targets(archives: dict[str, str], pg_restore: str) -> None:
    _, items = list_archive(archives["custom"], pg_restore)
    ids = by_id(items)
    for path in (archives["directory"], archives["custom"]):
        targets = post_data_targets(path, pg_restore)
        kinds = {(ids[k].desc, t.kind, t.table) for k, t in targets.items()}
        assert ("FK CONSTRAINT", "foreign key", 'my schema.odd "table"') in kinds
        assert ("CONSTRAINT", "primary key", "public.child") in kinds
        assert ("INDEX", "index", 'my schema.odd "table"') in kinds
        for k, t in targets.items():
            assert (ids[k].desc, ids[k].schema, ids[k].tag) == (t.desc, t.schema, t.name)
        # each index / constraint depends on the TABLE item of its table
        pk = next(t for t in targets.values() if t.name == "child child_pkey")
        assert any(ids[d].relation == "public.child" for d in pk.dependencies)


@pytest.mark.integration
def test_real_key_costs(archives: dict[str, str], pg_restore: str) -> None:
    """The text keys of the sample (a unique text column, two indexes led by
    a text column, one on a quoted table) cost KEY_COSTS["text"] a row, and
    a key of two columns KEY_EXTRA_COLUMN more (the text one, and the
    partitioned table's key and its partition's); single int keys and the
    rest are left at 1 (not listed)."""
    two = 1 + KEY_EXTRA_COLUMN
    for path in (archives["directory"], archives["custom"]):
        _, items = list_archive(path, pg_restore)
        targets = post_data_targets(path, pg_restore)
        costs = key_costs(path, targets, items, pg_restore)
        assert {targets[k].name: v for k, v in costs.items()} == pytest.approx({
            "parent parent_code_key": KEY_COSTS["text"], "child_v_idx": KEY_COSTS["text"],
            "odd idx": KEY_COSTS["text"], "child_v_uidx": KEY_COSTS["text"] * two,
            "meas meas_pk": two, "meas_2024 meas_2024_pkey": two})
    # the live plan of a restore keeps them (a replay plans the same) and
    # weighs the builds by them: child's text index twice its int key
    from types import SimpleNamespace

    from pgparmon.advise.inventory import restore_inventory
    from pgparmon.analyze.progress import Tracker
    from pgparmon.jobs.base import Job
    from pgparmon.jobs.pg_restore import PgRestore
    from pgparmon.jobs.registry import driver_for

    src = SimpleNamespace(target_dir=archives["directory"],
                          client_binary=lambda name: pg_restore)
    tr = Tracker(Job(kind="pg_restore", database="x", jobs=2), driver_for("pg_restore"))
    inputs = PgRestore().read_plan(src, PgRestore().plan_request(tr))
    assert inputs is not None and not inputs.error
    assert {int(k) for k in (inputs.extra or {})["key_costs"]} == set(costs)
    assert PgRestore().plan(tr, inputs)
    work = {it.name: it.work for it in tr.items.values() if it.relation == "public.child"
            and it.kind != "data"}
    assert work["child_v_idx"] == pytest.approx(KEY_COSTS["text"] * work["child_pkey"])
    # ... and so does the advice's
    inv = restore_inventory(archives["directory"], pg_restore)
    assert inv.key_costs == costs
    # pg_dump's gzip files of the empty and one-row tables are larger than
    # their text: no 4 GiB wrap (every table of the sample is under 1 MB)
    assert all(t.heap_bytes < 1e6 for t in inv.tables), \
        [(t.name, t.heap_bytes) for t in inv.tables if t.heap_bytes >= 1e6]
    # the builds the server may give parallel workers: btrees on plain
    # columns of tables that have data, with their key's cost
    pb = {targets[int(k)].name: v for k, v in inv.parallel_builds().items()}
    assert pb["child_v_idx"][1] == KEY_COSTS["text"] and pb["child child_pkey"][1] == 1.0
    assert pb["child_v_idx"][0] == pb["child child_pkey"][0] > 0  # its table's heap
    assert not {n for n in pb if n.startswith(("ex ", "mv_", "meas_d_idx", "meas meas_pk"))}


@pytest.mark.integration
def test_real_full_script_links_every_block(archives: dict[str, str], pg_restore: str) -> None:
    script = subprocess.run([pg_restore, "-v", "-f", "-", archives["custom"]],
                            capture_output=True, text=True, check=True, timeout=60).stdout
    items = by_id(list_archive(archives["custom"], pg_restore)[1])
    targets = link_targets(parse_post_data_sql(script), ())
    assert set(targets) == set(items)  # every listed item has a block, found by dump id
    assert targets[next(k for k, it in items.items() if it.desc == "BLOBS")].kind == "other"


@pytest.mark.integration
def test_real_archive_formats(archives: dict[str, str]) -> None:
    assert archive_format(archives["directory"]) == "directory"
    assert archive_format(archives["custom"]) == "custom"
    assert archive_format(archives["tar"]) == "tar"


@pytest.mark.integration
def test_real_errors(archives: dict[str, str], pg_restore: str, tmp_path: Path) -> None:
    text = tmp_path / "plain.txt"
    text.write_text("hello\n")
    with pytest.raises(TocError, match="does not appear to be a valid archive") as exc:
        list_archive(text, pg_restore)
    assert "\n" not in str(exc.value) and "pg_restore: error" not in str(exc.value)
    with pytest.raises(TocError, match=r"toc\.dat"):
        list_archive(tmp_path, pg_restore)
    with pytest.raises(TocError, match="no such file"):
        list_archive(tmp_path / "missing", pg_restore)
    with pytest.raises(TocError, match="cannot run"):
        list_archive(archives["custom"], str(tmp_path / "no-pg_restore"))
    truncated = tmp_path / "trunc.custom"
    truncated.write_bytes(Path(archives["custom"]).read_bytes()[:3000])
    with pytest.raises(TocError, match="end of file"):
        post_data_targets(truncated, pg_restore)


@pytest.mark.integration
def test_find_pg_restore_falls_back(monkeypatch: pytest.MonkeyPatch,
                                    archives: dict[str, str]) -> None:
    if not any(Path("/usr/lib/postgresql").glob("*/bin/pg_restore")):
        pytest.skip("no /usr/lib/postgresql/*/bin/pg_restore")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("PGPARMON_PGBIN", raising=False)
    assert shutil.which("pg_restore") is None
    assert list_archive(archives["custom"])[0].format == "custom"
