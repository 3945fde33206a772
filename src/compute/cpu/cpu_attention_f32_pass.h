/* The passes of the fp32 attention around its two kernels, shared by cpu_attention_f32.c (AVX-512)
 * and cpu_attention_f32_avx2.c (AVX2 + FMA): the work items, the per-kv-head key tiles, the online
 * softmax's bookkeeping and the final o / l, written once. Each including file defines first TGT,
 * KB, ROWS, MR, rup(), its register kernel gemm_f32() and its softmax step row_step(), and
 * ATT32_ENTRY, the name of the entry point this header defines; the compiled code of each file is
 * the code it had when it held these lines itself (the same source after preprocessing). */
typedef struct {
    float *o; const float *q, *k, *v;
    size_t ldo, ldq, ldk, ldv, Tq, Tk, nkv, hd, hp, group, qb, nblk, rows, tkp;
    size_t j;        /* the kv head of this pass */
    float *KT, *V;   /* kv head j: per key tile, Kᵀ [hd][KB] and V [KB][hp] */
    float scale; int causal;
    unsigned char *ds; size_t dper; /* per worker: Q block, S, O (float), m, l (double) */
} att32_ctx;

/* Key tiles [b, e) of kv head j into KT and V (zeros past Tk and past hd). */
static void prep_fn(void *c_, size_t b, size_t e, int worker) {
    (void)worker;
    att32_ctx *c = c_;
    const size_t hd = c->hd, hp = c->hp;
    for (size_t u = b; u < e; u++) {
        float *kt = c->KT + u * hd * KB, *vt = c->V + u * KB * hp;
        for (size_t tt = 0; tt < KB; tt++) {
            size_t t = u * KB + tt;
            const float *kr = t < c->Tk ? c->k + t * c->ldk + c->j * hd : NULL;
            const float *vr = t < c->Tk ? c->v + t * c->ldv + c->j * hd : NULL;
            for (size_t d = 0; d < hd; d++) kt[d * KB + tt] = kr ? kr[d] : 0.0f;
            for (size_t d = 0; d < hp; d++) vt[tt * hp + d] = vr && d < hd ? vr[d] : 0.0f;
        }
    }
}

static TGT void att_item(const att32_ctx *c, size_t bz, unsigned char *ds) {
    const size_t hd = c->hd, hp = c->hp, group = c->group, rows = c->rows, j = c->j;
    size_t blk = clef_att_block(bz, c->nblk);
    size_t i0 = blk * c->qb, nq = c->Tq - i0 < c->qb ? c->Tq - i0 : c->qb;
    size_t nr = group * nq;
    double *m = (double *)(void *)ds, *l = m + rows;
    float *Qs = (float *)(void *)(l + rows), *S = Qs + rows * hd, *O = S + rows * KB;
    for (size_t gi = 0; gi < group; gi++)
        for (size_t ii = 0; ii < nq; ii++)
            memcpy(Qs + (gi * nq + ii) * hd, c->q + (i0 + ii) * c->ldq + (j * group + gi) * hd, hd * sizeof(float));
    for (size_t r = 0; r < nr; r++) { m[r] = -INFINITY; l[r] = 0.0; }
    memset(O, 0, nr * hp * sizeof(float));
    size_t tmax = c->Tk;
    const size_t off = c->Tk - c->Tq; /* causal: keys before the queries' own rows (a cache's) */
    if (c->causal && i0 + nq + off < tmax) tmax = i0 + nq + off;
    for (size_t t0 = 0; t0 < tmax; t0 += KB) {
        size_t nt = tmax - t0 < KB ? tmax - t0 : KB;
        gemm_f32(S, KB, Qs, hd, c->KT + t0 * hd, KB, nr, hd, KB, 0);
        for (size_t r = 0; r < nr; r++)
            row_step(S + r * KB, clef_att_valid(c->causal, i0 + r % nq + off, t0, nt), c->scale, m + r, l + r,
                     O + r * hp, hp);
        gemm_f32(O, hp, S, KB, c->V + t0 * hp, hp, nr, nt, hp, 1);
    }
    for (size_t r = 0; r < nr; r++) {
        size_t gi = r / nq, ii = r % nq;
        float *orow = c->o + (i0 + ii) * c->ldo + (j * group + gi) * hd;
        for (size_t d = 0; d < hd; d++) orow[d] = (float)((double)O[r * hp + d] / l[r]);
    }
}

static void att_fn(void *c_, size_t b, size_t e, int worker) {
    att32_ctx *c = c_;
    for (size_t it = b; it < e; it++) att_item(c, it, c->ds + (size_t)worker * c->dper);
}

int ATT32_ENTRY(clef_pool *pool, float *o, size_t ldo, const float *q, size_t ldq,
                 const float *k, size_t ldk, const float *v, size_t ldv, size_t Tq, size_t Tk,
                 size_t nh, size_t nkv, size_t hd, float scale, int causal) {
    if (Tq == 0 || nh == 0) return 0;
    if (causal && Tk < Tq) return -1;
    att32_ctx c;
    memset(&c, 0, sizeof c);
    c.o = o; c.q = q; c.k = k; c.v = v;
    c.ldo = ldo; c.ldq = ldq; c.ldk = ldk; c.ldv = ldv;
    c.Tq = Tq; c.Tk = Tk; c.nkv = nkv; c.hd = hd;
    c.hp = rup(hd ? hd : 1, 16);
    c.tkp = rup(Tk ? Tk : 1, KB);
    c.group = nh / nkv;
    c.scale = scale;
    c.causal = causal;
    int nw = pool ? clef_pool_size(pool) : 1;
    clef_att_plan(Tq, c.group, ROWS, nw, &c.qb, &c.nblk);
    c.rows = rup(c.group * c.qb, MR) + MR; /* A slack for the kernel */
    c.dper = rup(2 * c.rows * sizeof(double) + c.rows * (hd + KB + c.hp) * sizeof(float), 64);
    c.ds = calloc((size_t)nw, c.dper); /* slack rows stay finite */
    c.KT = malloc(hd * c.tkp * sizeof(float) + 64);
    c.V = malloc(c.tkp * c.hp * sizeof(float) + 64);
    if (!c.ds || !c.KT || !c.V) { free(c.ds); free(c.KT); free(c.V); return -1; }
    for (c.j = 0; c.j < nkv; c.j++) {
        if (Tk) clef_pool_for(pool, c.tkp / KB, 1, prep_fn, &c);
        clef_pool_for(pool, c.nblk, 1, att_fn, &c);
    }
    free(c.ds);
    free(c.KT);
    free(c.V);
    return 0;
}
