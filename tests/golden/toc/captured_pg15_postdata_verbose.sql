--
-- PostgreSQL database dump
--

\restrict cp0XodlAZLWPt1RchjpLE0RV7YlFmJC9SLDv82E03zRhpBGrxmvGc9WSLP70DXs

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

-- Started on 2026-11-22 14:02:16 UTC

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
-- TOC entry 3248 (class 2606 OID 16421)
-- Dependencies: 220
-- Name: odd "table" odd "table"_pkey; Type: CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE ONLY "my schema"."odd ""table"""
    ADD CONSTRAINT "odd ""table""_pkey" PRIMARY KEY (a);


--
-- TOC entry 3238 (class 2606 OID 16423)
-- Dependencies: 220 220
-- Name: odd "table" odd check; Type: CHECK CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE "my schema"."odd ""table"""
    ADD CONSTRAINT "odd check" CHECK ((a > 0)) NOT VALID;


--
-- TOC entry 3244 (class 2606 OID 16406)
-- Dependencies: 218
-- Name: child child_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_pkey PRIMARY KEY (id);


--
-- TOC entry 3252 (class 2606 OID 16454)
-- Dependencies: 223
-- Name: ex ex_r_excl; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.ex
    ADD CONSTRAINT ex_r_excl EXCLUDE USING gist (r WITH &&);


--
-- TOC entry 3255 (class 2606 OID 16464)
-- Dependencies: 224 224
-- Name: meas meas_pk; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.meas
    ADD CONSTRAINT meas_pk PRIMARY KEY (id, d);


--
-- TOC entry 3258 (class 2606 OID 16466)
-- Dependencies: 225 225 3255 225
-- Name: meas_2024 meas_2024_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.meas_2024
    ADD CONSTRAINT meas_2024_pkey PRIMARY KEY (id, d);


--
-- TOC entry 3240 (class 2606 OID 16398)
-- Dependencies: 216
-- Name: parent parent_code_key; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.parent
    ADD CONSTRAINT parent_code_key UNIQUE (code);


--
-- TOC entry 3242 (class 2606 OID 16396)
-- Dependencies: 216
-- Name: parent parent_pkey; Type: CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.parent
    ADD CONSTRAINT parent_pkey PRIMARY KEY (id);


--
-- TOC entry 3249 (class 1259 OID 16422)
-- Dependencies: 220
-- Name: odd idx; Type: INDEX; Schema: my schema; Owner: postgres
--

CREATE INDEX "odd idx" ON "my schema"."odd ""table""" USING btree (b);


--
-- TOC entry 3245 (class 1259 OID 16412)
-- Dependencies: 218
-- Name: child_v_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX child_v_idx ON public.child USING btree (v);


--
-- TOC entry 3440 (class 0 OID 0)
-- Dependencies: 3245
-- Name: INDEX child_v_idx; Type: COMMENT; Schema: public; Owner: postgres
--

COMMENT ON INDEX public.child_v_idx IS 'an index comment';


--
-- TOC entry 3246 (class 1259 OID 16413)
-- Dependencies: 218 218
-- Name: child_v_uidx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE UNIQUE INDEX child_v_uidx ON public.child USING btree (v, id);


--
-- TOC entry 3253 (class 1259 OID 16461)
-- Dependencies: 224
-- Name: meas_d_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX meas_d_idx ON ONLY public.meas USING btree (d);


--
-- TOC entry 3256 (class 1259 OID 16462)
-- Dependencies: 225 225 3253
-- Name: meas_2024_d_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX meas_2024_d_idx ON public.meas_2024 USING btree (d);


--
-- TOC entry 3250 (class 1259 OID 16442)
-- Dependencies: 222
-- Name: mv_idx; Type: INDEX; Schema: public; Owner: postgres
--

CREATE INDEX mv_idx ON public.mv_child USING btree (parent_id);


--
-- TOC entry 3259 (class 0 OID 0)
-- Dependencies: 3256 3253 225 224
-- Name: meas_2024_d_idx; Type: INDEX ATTACH; Schema: public; Owner: postgres
--

ALTER INDEX public.meas_d_idx ATTACH PARTITION public.meas_2024_d_idx;


--
-- TOC entry 3260 (class 0 OID 0)
-- Dependencies: 3255 225 3258 3255 225 224
-- Name: meas_2024_pkey; Type: INDEX ATTACH; Schema: public; Owner: postgres
--

ALTER INDEX public.meas_pk ATTACH PARTITION public.meas_2024_pkey;


--
-- TOC entry 3261 (class 3381 OID 16468)
-- Dependencies: 218 218
-- Name: child_stats; Type: STATISTICS; Schema: public; Owner: postgres
--

CREATE STATISTICS public.child_stats ON parent_id, v FROM public.child;


ALTER STATISTICS public.child_stats OWNER TO postgres;

--
-- TOC entry 3411 (class 2618 OID 16447)
-- Dependencies: 216 216 216
-- Name: parent r_noop; Type: RULE; Schema: public; Owner: postgres
--

CREATE RULE r_noop AS
    ON DELETE TO public.parent DO INSTEAD NOTHING;


--
-- TOC entry 3265 (class 2620 OID 16445)
-- Dependencies: 227 218 218
-- Name: child child_ctrg; Type: TRIGGER; Schema: public; Owner: postgres
--

CREATE CONSTRAINT TRIGGER child_ctrg AFTER UPDATE OF v ON public.child DEFERRABLE INITIALLY IMMEDIATE FOR EACH ROW EXECUTE FUNCTION public.trg();


--
-- TOC entry 3266 (class 2620 OID 16444)
-- Dependencies: 218 227
-- Name: child child_trg; Type: TRIGGER; Schema: public; Owner: postgres
--

CREATE TRIGGER child_trg BEFORE INSERT ON public.child FOR EACH ROW EXECUTE FUNCTION public.trg();


--
-- TOC entry 3264 (class 2606 OID 16424)
-- Dependencies: 216 220 3242
-- Name: odd "table" odd fk; Type: FK CONSTRAINT; Schema: my schema; Owner: postgres
--

ALTER TABLE ONLY "my schema"."odd ""table"""
    ADD CONSTRAINT "odd fk" FOREIGN KEY (p) REFERENCES public.parent(id) DEFERRABLE;


--
-- TOC entry 3262 (class 2606 OID 16429)
-- Dependencies: 218 3248 220
-- Name: child child_odd_fk; Type: FK CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_odd_fk FOREIGN KEY (parent_id) REFERENCES "my schema"."odd ""table"""(a) ON DELETE CASCADE NOT VALID;


--
-- TOC entry 3263 (class 2606 OID 16407)
-- Dependencies: 216 218 3242
-- Name: child child_parent_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: postgres
--

ALTER TABLE ONLY public.child
    ADD CONSTRAINT child_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES public.parent(id);


--
-- TOC entry 3413 (class 3256 OID 16467)
-- Dependencies: 216 216
-- Name: parent p_parent; Type: POLICY; Schema: public; Owner: postgres
--

CREATE POLICY p_parent ON public.parent USING ((n > 0));


--
-- TOC entry 3412 (class 0 OID 16388)
-- Dependencies: 216
-- Name: parent; Type: ROW SECURITY; Schema: public; Owner: postgres
--

ALTER TABLE public.parent ENABLE ROW LEVEL SECURITY;

--
-- TOC entry 3414 (class 6104 OID 16469)
-- Name: pub; Type: PUBLICATION; Schema: -; Owner: postgres
--

CREATE PUBLICATION pub WITH (publish = 'insert, update, delete, truncate');


ALTER PUBLICATION pub OWNER TO postgres;

--
-- TOC entry 3415 (class 6106 OID 16470)
-- Dependencies: 3414 216
-- Name: pub parent; Type: PUBLICATION TABLE; Schema: public; Owner: postgres
--

ALTER PUBLICATION pub ADD TABLE ONLY public.parent;


--
-- TOC entry 3234 (class 3466 OID 16472)
-- Dependencies: 228
-- Name: evt_trg; Type: EVENT TRIGGER; Schema: -; Owner: postgres
--

CREATE EVENT TRIGGER evt_trg ON ddl_command_end
   EXECUTE FUNCTION public.evt();


ALTER EVENT TRIGGER evt_trg OWNER TO postgres;

--
-- TOC entry 3422 (class 0 OID 16438)
-- Dependencies: 222 3429
-- Name: mv_child; Type: MATERIALIZED VIEW DATA; Schema: public; Owner: postgres
--

REFRESH MATERIALIZED VIEW public.mv_child;


-- Completed on 2026-11-22 14:02:16 UTC

--
-- PostgreSQL database dump complete
--

\unrestrict cp0XodlAZLWPt1RchjpLE0RV7YlFmJC9SLDv82E03zRhpBGrxmvGc9WSLP70DXs

