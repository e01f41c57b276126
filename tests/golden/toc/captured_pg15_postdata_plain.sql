--
-- PostgreSQL database dump
--

\restrict fcv7GdV38XqdLxkqpfQH67NSyKjRt69mjuzItodTAoOQAs1mz6b3efOy85oCqPP

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

--
-- Name: odd "table" odd "table"_pkey; Type: CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE ONLY "my schema"."odd ""table"""
    ADD CONSTRAINT "odd ""table""_pkey" PRIMARY KEY (a);


--
-- Name: odd "table" odd check; Type: CHECK CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE "my schema"."odd ""table"""
    ADD CONSTRAINT "odd check" CHECK ((a > 0)) NOT VALID;


--
-- Name: child child_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_pkey PRIMARY KEY (id);


--
-- Name: ex ex_r_excl; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.ex
    ADD CONSTRAINT ex_r_excl EXCLUDE USING gist (r WITH &&);


--
-- Name: meas meas_pk; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.meas
    ADD CONSTRAINT meas_pk PRIMARY KEY (id, d);


--
-- Name: meas_2024 meas_2024_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.meas_2024
    ADD CONSTRAINT meas_2024_pkey PRIMARY KEY (id, d);


--
-- Name: parent parent_code_key; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.parent
    ADD CONSTRAINT parent_code_key UNIQUE (code);


--
-- Name: parent parent_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.parent
    ADD CONSTRAINT parent_pkey PRIMARY KEY (id);


--
-- Name: odd idx; Type: INDEX; Schema: my schema; Owner: postgres
--

CREATE INDEX "odd idx" ON "my schema"."odd ""table""" USING btree (b);


--
-- Name: child_v_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX child_v_idx ON public.child USING btree (v);


--
-- Name: INDEX child_v_idx; Type: COMMENT; Schema: public; Owner: postgres
--

COMMENT ON INDEX public.child_v_idx IS 'an index comment';


--
-- Name: child_v_uidx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE UNIQUE INDEX child_v_uidx ON public.child USING btree (v, id);


--
-- Name: meas_d_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX meas_d_idx ON ONLY public.meas USING btree (d);


--
-- Name: meas_2024_d_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX meas_2024_d_idx ON public.meas_2024 USING btree (d);


--
-- Name: mv_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX mv_idx ON public.mv_child USING btree (parent_id);


--
-- Name: meas_2024_d_idx; Type: INDEX ATTACH; Schema: public; Owner: postgres
--

ALTER INDEX public.meas_d_idx ATTACH PARTITION public.meas_2024_d_idx;


--
-- Name: meas_2024_pkey; Type: INDEX ATTACH; Schema: public; Owner: postgres
--

ALTER INDEX public.meas_pk ATTACH PARTITION public.meas_2024_pkey;


--
-- Name: child_stats; Type: STATISTICS; Schema: public; Owner: postgres
--

CREATE STATISTICS public.child_stats ON parent_id, v FROM public.child;


ALTER STATISTICS public.child_stats OWNER TO postgres;

--
-- Name: parent r_noop; Type: RULE; Schema: public; Owner: postgres
--

CREATE RULE r_noop AS
    ON DELETE TO public.parent DO INSTEAD NOTHING;


--
-- Name: child child_ctrg; Type: TRIGGER; Schema: public; Owner: postgres
--

CREATE CONSTRAINT TRIGGER child_ctrg AFTER UPDATE OF v ON public.child DEFERRABLE INITIALLY IMMEDIATE FOR EACH ROW EXECUTE FUNCTION public.trg();


--
-- Name: child child_trg; Type: TRIGGER; Schema: public; Owner: postgres
--

CREATE TRIGGER child_trg BEFORE INSERT ON public.child FOR EACH ROW EXECUTE FUNCTION public.trg();


--
-- Name: odd "table" odd fk; Type: FK CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE ONLY "my schema"."odd ""table"""
    ADD CONSTRAINT "odd fk" FOREIGN KEY (p) REFERENCES public.parent(id) DEFERRABLE;


--
-- Name: child child_odd_fk; Type: FK CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_odd_fk FOREIGN KEY (parent_id) REFERENCES "my schema"."odd ""table"""(a) ON DELETE CASCADE NOT VALID;


--
-- Name: child child_parent_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES public.parent(id);


--
-- Name: parent p_parent; Type: POLICY; Schema: public; Owner: postgres
--

CREATE POLICY p_parent ON public.parent USING ((n > 0));


--
-- Name: parent; Type: ROW SECURITY; Schema: public; Owner: postgres
--

ALTER TABLE public.parent ENABLE ROW LEVEL SECURITY;

--
-- Name: pub; Type: PUBLICATION; Schema: -; Owner: postgres
--

CREATE PUBLICATION pub WITH (publish = 'insert, update, delete, truncate');


ALTER PUBLICATION pub OWNER TO postgres;

--
-- Name: pub parent; Type: PUBLICATION TABLE; Schema: public; Owner: postgres
--

ALTER PUBLICATION pub ADD TABLE ONLY public.parent;


--
-- Name: evt_trg; Type: EVENT TRIGGER; Schema: -; Owner: postgres
--

CREATE EVENT TRIGGER evt_trg ON ddl_command_end
   EXECUTE FUNCTION public.evt();


ALTER EVENT TRIGGER evt_trg OWNER TO postgres;

--
-- Name: mv_child; Type: MATERIALIZED VIEW DATA; Schema: public; Owner: postgres
--

REFRESH MATERIALIZED VIEW public.mv_child;


--
-- PostgreSQL database dump complete
--

\unrestrict fcv7GdV38XqdLxkqpfQH67NSyKjRt69mjuzItodTAoOQAs1mz6b3efOy85oCqPP

