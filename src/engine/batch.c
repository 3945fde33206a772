/* The model for a batch of jobs: one packed forward (docs/architecture.md "Packed forwards").
 *
 *   1. per job: does the state cache hold its prefix (a hit: it resumes there), or will this run
 *      save it (a miss that reserves an entry)? (engine/state_cache.h)
 *   2. the vision tower over every image of the jobs that start from position 0, packed;
 *   3. one text forward over the jobs' rows (each a segment: its own positions, its own conv and
 *      delta-rule state, attention within itself), saving or resuming states where asked;
 *   4. the joint head over every job at once (its Linears over all their rows, attention within
 *      each); then the new cache entries are published.
 * Ops that mix rows never mix segments and every other op is per row, so a job's bits do not depend
 * on its company nor on whether its prefix came from the cache. When a packed run fails (out of
 * memory, a bad image), its jobs are run again one at a time, so one job's failure is its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/engine_internal.h"
#include "engine/state_key.h"
#include "model/head.h"
#include "model/positions.h"
#include "model/text.h"
#include "model/vision.h"

typedef struct {
    clef_job *j;
    size_t past;              /* leading tokens resumed from the cache */
    size_t snap;              /* leading tokens whose state this run saves (0: none) */
    clef_cache_entry *hit, *pending;
    size_t row0, n;           /* its rows in the packed forward */
} plan;

/* Step 1 for one job: the prefix the cache may hold (engine/state_key.h: clef_record_cache_rows, a
 * resumed job never runs the tower) and its media hashes, the ones the routing key is made of. */
static void plan_cache(clef_engine *e, plan *p) {
    const clef_record *r = &p->j->rec;
    if (!e->cache) return;
    size_t P = clef_record_cache_rows(r);
    if (P == 0) return;
    const uint8_t *h = clef_job_media_hashes(p->j);
    if (r->n_images && !h) return; /* out of memory: run uncached */
    p->hit = clef_cache_lookup(e->cache, r->input_ids, P, h, r->n_images);
    if (p->hit) p->past = P;
    else if ((p->pending = clef_cache_reserve(e->cache, r->input_ids, P, h, r->n_images)) != NULL) p->snap = P;
}

/* Step 4 for plans[0 .. m): the joint head over their rows of `hidden` as one call. Returns 0, or
 * -1 with the error in every job. */
static int run_heads(clef_engine *e, plan *ps, size_t m, const float *hidden) {
    clef_ops *ops = e->ops;
    const size_t H = (size_t)e->mf->cfg.text.hidden_size;
    size_t nq = 0, no = 0;
    for (size_t i = 0; i < m; i++) {
        nq += ps[i].j->rec.n_questions;
        no += ps[i].j->n_logits;
    }
    clef_head_in *hin = calloc(m, sizeof *hin);
    clef_head_question *hq = calloc(nq ? nq : 1, sizeof *hq);
    int32_t *spans = calloc(2 * (no ? no : 1), sizeof *spans);
    float **logits = calloc(m, sizeof *logits);
    clef_err err;
    clef_err_clear(&err);
    int rc = -1;
    if (!hin || !hq || !spans || !logits) {
        clef_err_set(&err, CLEF_E_OOM, "out of memory");
        goto out;
    }
    size_t qi = 0, k = 0;
    for (size_t i = 0; i < m; i++) {
        const clef_record *r = &ps[i].j->rec;
        hin[i].questions = hq + qi;
        for (size_t q = 0; q < r->n_questions; q++, qi++) {
            const clef_enc_question *eq = &r->questions[q];
            hq[qi].type = (clef_qtype)eq->type;
            hq[qi].q_start = (int32_t)eq->span.start;
            hq[qi].q_end = (int32_t)eq->span.end;
            hq[qi].n_options = (int)eq->n_options;
            hq[qi].option_spans = spans + 2 * k;
            for (size_t o = 0; o < eq->n_options; o++, k++) {
                spans[2 * k] = (int32_t)eq->option_spans[o].start;
                spans[2 * k + 1] = (int32_t)eq->option_spans[o].end;
            }
        }
        hin[i].hidden = hidden + ps[i].row0 * H;
        hin[i].T = r->n_ids;
        hin[i].ids = r->input_ids;
        hin[i].n_questions = (int)r->n_questions;
        hin[i].past = ps[i].past;
        hin[i].mem_past = ps[i].hit ? ps[i].hit->mem : NULL;
        hin[i].mem_snap = ps[i].pending ? ps[i].pending->mem : NULL;
        hin[i].snap_rows = ps[i].pending ? ps[i].snap : 0;
        logits[i] = ps[i].j->logits;
    }
    rc = clef_head_forward_batch(ops, &e->mf->head_cfg, &e->mf->head, &e->mf->text.lm_head, hin, m, logits, &err);
    if (rc == 0) rc = clef_ops_take(ops, "the head", &err);
    clef_ops_clear(ops);
out:
    if (rc)
        for (size_t i = 0; i < m; i++) ps[i].j->err = err;
    free(hin);
    free(hq);
    free(spans);
    free(logits);
    return rc;
}

/* Step 2: the vision tower over the images of the jobs that start at position 0, into *rows
 * (*img_rows of them, their pad positions to come in *rpos). 0, or -1 with err set. */
static int run_vision(clef_engine *e, plan *ps, size_t m, clef_vision_image *vi, size_t n_img, float **rows,
                      int32_t **rpos, size_t *img_rows, clef_err *err) {
    clef_ops *ops = e->ops;
    const clef_config *cfg = &e->mf->cfg;
    const size_t H = (size_t)cfg->text.hidden_size;
    const clef_vision_config *vc = &cfg->vision;
    if (!vc->present || !e->mf->vision.present) {
        clef_err_set(err, CLEF_E_UNSUPPORTED_MEDIA, "this model has no vision tower; images are not accepted");
        return -1;
    }
    if (vc->out_hidden_size != cfg->text.hidden_size) {
        clef_err_set(err, CLEF_E_BAD_MODEL, "vision_config.out_hidden_size %d != text hidden_size %d",
                     vc->out_hidden_size, cfg->text.hidden_size);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        const clef_record *r = &ps[i].j->rec;
        if (ps[i].past) continue;
        for (size_t q = 0; q < r->n_images; q++, k++) {
            const clef_enc_image *ei = &r->images[q];
            vi[k].pixel_values = ei->image.pixel_values;
            vi[k].grid_t = ei->image.grid_t;
            vi[k].grid_h = ei->image.grid_h;
            vi[k].grid_w = ei->image.grid_w;
            size_t nt = clef_vision_tokens(vc, &vi[k]);
            if (!ei->image.pixel_values || nt != ei->n_pad) {
                clef_err_set(err, CLEF_E_INTERNAL, "image %zu: %zu pad tokens for grid (%d, %d, %d)%s", q, ei->n_pad,
                             ei->image.grid_t, ei->image.grid_h, ei->image.grid_w,
                             ei->image.pixel_values ? "" : " without pixel values");
                return -1;
            }
            *img_rows += nt;
        }
    }
    *rows = ops->alloc(ops, *img_rows * H);
    *rpos = malloc(*img_rows * sizeof **rpos);
    if (!*rows || !*rpos) { clef_err_set(err, CLEF_E_OOM, "out of memory for %zu image tokens", *img_rows); return -1; }
    if (clef_vision_forward(ops, vc, &e->mf->vision, vi, n_img, NULL, *rows, err)) return -1;
    return 0;
}

/* Step 3's inputs: each job's ids, its segment (state to resume from, state to snapshot), and with
 * images its three position planes and its image rows' places (rpos). 0, or -1 with err set. */
static int pack_inputs(const clef_config *cfg, plan *ps, size_t m, int any_img, int32_t *ids, clef_forward_seg *segs,
                       clef_pos_image *pi, int32_t *const pos[3], int32_t *const rec_pos[3], int32_t *rpos,
                       clef_err *err) {
    size_t ri = 0;
    for (size_t i = 0; i < m; i++) {
        const clef_record *r = &ps[i].j->rec;
        const size_t past = ps[i].past, row0 = ps[i].row0;
        memcpy(ids + row0, r->input_ids + past, ps[i].n * sizeof *ids);
        segs[i].n = ps[i].n;
        segs[i].resume = ps[i].hit ? &ps[i].hit->st : NULL;
        segs[i].snap = ps[i].pending ? &ps[i].pending->st : NULL;
        if (!any_img) continue;
        if (r->n_images) {
            for (size_t q = 0; q < r->n_images; q++) {
                pi[q].pad_start = r->images[q].pad_start;
                pi[q].n_pad = r->images[q].n_pad;
                pi[q].grid_t = r->images[q].image.grid_t;
                pi[q].grid_h = r->images[q].image.grid_h;
                pi[q].grid_w = r->images[q].image.grid_w;
            }
            if (clef_mrope_positions(r->n_ids, pi, r->n_images, cfg->vision.spatial_merge_size, rec_pos[0], rec_pos[1],
                                     rec_pos[2], err))
                return -1;
            for (int p = 0; p < 3; p++) memcpy(pos[p] + row0, rec_pos[p] + past, ps[i].n * sizeof(int32_t));
            if (past == 0)
                for (size_t q = 0; q < r->n_images; q++)
                    for (size_t t = 0; t < r->images[q].n_pad; t++) rpos[ri++] = (int32_t)(row0 + r->images[q].pad_start + t);
        } else {
            for (size_t t = 0; t < ps[i].n; t++) pos[0][row0 + t] = pos[1][row0 + t] = pos[2][row0 + t] = (int32_t)(past + t);
        }
    }
    return 0;
}

/* Step 4: the head over every job at once; when that fails, per job (one job's failure is its
 * own). Then each job that succeeded counts its reused rows and publishes its snapshot. */
static void finish_heads(clef_engine *e, plan *ps, size_t m, const float *hidden) {
    if (run_heads(e, ps, m, hidden) != 0 && m > 1) {
        for (size_t i = 0; i < m; i++) {
            clef_err_clear(&ps[i].j->err);
            run_heads(e, &ps[i], 1, hidden);
        }
    }
    for (size_t i = 0; i < m; i++)
        if (!ps[i].j->err.type) {
            ps[i].j->cached_tokens = ps[i].past;
            if (ps[i].past) clef_cache_add_reused(e->cache, ps[i].past);
            if (ps[i].pending) clef_cache_publish(e->cache, ps[i].pending);
        }
}

/* Steps 2-4 for plans[0 .. m). Returns 0, or -1 when the group as a whole failed (the error is in
 * every job; head failures are per job and do not fail the group). With times, writes the wall
 * seconds of steps 2-3 (the tower and the text forward) and of step 4 (the head). */
static int run_group(clef_engine *e, plan *ps, size_t m, clef_group_times *times) {
    clef_ops *ops = e->ops;
    const clef_config *cfg = &e->mf->cfg;
    const size_t H = (size_t)cfg->text.hidden_size;
    clef_err err;
    clef_err_clear(&err);
    int rc = -1;
    size_t T = 0, n_img = 0, img_rows = 0;
    int any_img = 0;
    for (size_t i = 0; i < m; i++) {
        const clef_record *r = &ps[i].j->rec;
        ps[i].row0 = T;
        ps[i].n = r->n_ids - ps[i].past;
        T += ps[i].n;
        if (r->n_images) any_img = 1;
        if (ps[i].past == 0) n_img += r->n_images;
    }
    int32_t *ids = malloc(T * sizeof *ids);
    clef_forward_seg *segs = calloc(m, sizeof *segs);
    clef_vision_image *vi = calloc(n_img ? n_img : 1, sizeof *vi);
    int32_t *pos[3] = {NULL, NULL, NULL}, *rec_pos[3] = {NULL, NULL, NULL}, *rpos = NULL;
    float *rows = NULL, *hidden = NULL;
    clef_pos_image *pi = NULL;
    if (!ids || !segs || !vi) { clef_err_set(&err, CLEF_E_OOM, "out of memory"); goto fail; }
    double t0 = clef_now();

    /* 2: the vision tower over the images of the jobs that start at position 0 */
    if (n_img && run_vision(e, ps, m, vi, n_img, &rows, &rpos, &img_rows, &err)) goto fail;

    /* 3: the packed text forward: ids, positions (all three planes when any job has images),
     * image rows at their pads, one segment per job */
    if (any_img) {
        size_t maxn = 0, maxi = 0;
        for (size_t i = 0; i < m; i++) {
            if (ps[i].j->rec.n_ids > maxn) maxn = ps[i].j->rec.n_ids;
            if (ps[i].j->rec.n_images > maxi) maxi = ps[i].j->rec.n_images;
        }
        for (int p = 0; p < 3; p++) {
            pos[p] = malloc(T * sizeof(int32_t));
            rec_pos[p] = malloc(maxn * sizeof(int32_t));
        }
        pi = calloc(maxi ? maxi : 1, sizeof *pi);
        if (!pos[0] || !pos[1] || !pos[2] || !rec_pos[0] || !rec_pos[1] || !rec_pos[2] || !pi) {
            clef_err_set(&err, CLEF_E_OOM, "out of memory");
            goto fail;
        }
    }
    if (pack_inputs(cfg, ps, m, any_img, ids, segs, pi, pos, rec_pos, rpos, &err)) goto fail;
    hidden = ops->alloc(ops, T * H);
    if (!hidden) { clef_err_set(&err, CLEF_E_OOM, "out of memory for %zu tokens", T); goto fail; }
    clef_layer_dump dump = {e->dump_dir, 0};
    clef_forward_in in = {0};
    in.ids = ids;
    in.n = T;
    in.nseg = m;
    in.segs = segs;
    if (any_img) for (int p = 0; p < 3; p++) in.pos[p] = pos[p];
    in.n_replace = img_rows;
    in.replace_pos = rpos;
    in.replace_rows = rows;
    if (e->dump_dir && m == 1) { /* layer dumps are one record's rows */
        in.on_layer = clef_layer_dump_fn;
        in.on_layer_user = &dump;
    }
    if (clef_text_forward(ops, cfg, &e->mf->text, &in, hidden, &err)) goto fail;
    if (dump.failed) { clef_err_set(&err, CLEF_E_IO, "could not write layer dumps to %s", e->dump_dir); goto fail; }
    if (clef_ops_take(ops, "the text forward", &err)) goto fail;
    double t1 = clef_now();

    /* 4: the head, per job when the whole group's fails */
    finish_heads(e, ps, m, hidden);
    if (times) {
        times->seconds_text = t1 - t0;
        times->seconds_head = clef_now() - t1;
    }
    rc = 0;
    goto done;
fail:
    clef_ops_clear(ops);
    for (size_t i = 0; i < m; i++) ps[i].j->err = err;
done:
    free(ids);
    free(segs);
    free(vi);
    free(pi);
    free(rpos);
    for (int p = 0; p < 3; p++) {
        free(pos[p]);
        free(rec_pos[p]);
    }
    if (rows) ops->free(ops, rows);
    if (hidden) ops->free(ops, hidden);
    return rc;
}

int clef_engine_run_packed(clef_engine *e, clef_job *const *jobs, size_t n) {
    if (n == 0) return 0;
    plan *ps = calloc(n, sizeof *ps);
    int failures = 0;
    if (!ps) {
        for (size_t i = 0; i < n; i++) {
            clef_err_clear(&jobs[i]->err);
            clef_err_set(&jobs[i]->err, CLEF_E_OOM, "out of memory");
            jobs[i]->ran = 1;
        }
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        clef_err_clear(&jobs[i]->err);
        jobs[i]->cached_tokens = 0;
        ps[i].j = jobs[i];
        plan_cache(e, &ps[i]);
    }
    if (run_group(e, ps, n, NULL) != 0 && n > 1) /* one at a time: each job's failure is its own */
        for (size_t i = 0; i < n; i++) {
            clef_err_clear(&jobs[i]->err);
            run_group(e, &ps[i], 1, NULL);
        }
    for (size_t i = 0; i < n; i++) {
        jobs[i]->ran = 1;
        if (jobs[i]->err.type) failures++;
        if (e->cache) {
            clef_cache_release(e->cache, ps[i].hit);
            clef_cache_release(e->cache, ps[i].pending);
        }
    }
    free(ps);
    return failures ? -1 : 0;
}

int clef_engine_run_group_timed(clef_engine *e, clef_job *const *jobs, size_t n, clef_group_times *times) {
    plan *ps = calloc(n ? n : 1, sizeof *ps);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        clef_err_clear(&jobs[i]->err);
        jobs[i]->cached_tokens = 0;
        if (!ps) clef_err_set(&jobs[i]->err, CLEF_E_OOM, "out of memory");
        jobs[i]->ran = 1;
    }
    if (!ps) return -1;
    for (size_t i = 0; i < n; i++) ps[i].j = jobs[i]; /* no plan_cache: every row is computed */
    if (n) run_group(e, ps, n, times);
    for (size_t i = 0; i < n; i++)
        if (jobs[i]->err.type) failures++;
    free(ps);
    return failures ? -1 : 0;
}
