"""Hand-built weights that make the MTP head and the DFlash drafter agree with the target often.

Speculative-decoding tests need both deep accepts and rejects. Random heads almost never agree
with a random target, so the "agree" variant is engineered (all in effective / MLX semantics):

* Geometry. Orthonormal directions c (common to every token), d (the "A" direction), i_A (only
  in token A) and per-token directions r_x (unit, orthogonal to c, d, i_A; r_A = i_A).
  Embeddings are 8·(κ·c + s·r_x); tokens in the set P(A) (A included) get
  8·(κ·c + s·(cos φ·r_x + sin φ·d)); the MASK token gets 8·(κ·c + s·d).
* Branching bigram lm_head. Row y = β·Σ r_x over x with g1(x) = y, plus β·ρ_x·r_x over x with
  g2(x) = y (ρ_x slightly below 1), plus β_A·d on A's row. Embed → final norm → lm_head alone
  predicts f(x) = g1(x), or A for x in P(A); g2(x) is a close runner-up, so the (scaled-down,
  `layer_scale`) random layers pick between them depending on context: varied text.
* Run regulator, in GatedDeltaNet state. In layer 0, value head 0 runs with a constant key and
  query, no decay and write strength β_reg: its state is an exponential moving average
  (factor 1 − β_reg) of [x is A, x is not A]; after the gated RMSNorm and out_proj it pushes
  the A logit down as the recent share of A grows, so a run of A ends once the push beats the
  A logit's margin, and P(A) tokens restart runs after the average decays. A-runs of varied
  length alternate with bigram chains. (Speculative engines that get GDN state rollback wrong
  change where the runs end.)
* Context coin, in GatedDeltaNet state. Each token carries a random ±1 bit (a small embedding
  component); layer 1's value head 0 keeps the EMA of those bits and writes it along a
  direction b that every lm_head row (except A's) reads with a random sign, so which of g1(x),
  g2(x) wins depends on the recent context: varied text, different per prompt.
* MTP head: fc = [I, b·bᵀ] (the normalised embedding of x_{t+1}, plus the coin read from the
  target's hidden H_t: fed [hidden, embedding] in the wrong order it agrees 0.30, not 0.81), its
  layer scaled down by `mtp_layer_scale`, mtp.norm = the final norm: it predicts what the target
  emits at t+1 except at run ends and where the coin moved.
* Drafter: layers scaled by `drafter_layer_scale`, so each MASK position outputs
  lm_head(norm(embed(MASK))) = A: accepted as deep as the target's current A-run.

Measured with engines/testing/measure.py (mlx-lm greedy, the 20 chat prompts of measure.PROMPTS
× 64 tokens, float32, default knobs, drafter block 4 = 3 drafted tokens):

    seed  A-share  distinct non-A  mean A-run  bigram-dominance  MTP accept  DFlash mean / 0 / full
    0     0.40     91              3.7         0.67              0.81        0.94 / 0.60 / 0.24
    1     0.50     23              2.1         0.76              0.76        0.83 / 0.49 / 0.05
    2     0.33     59              3.1         0.81              0.78        0.69 / 0.67 / 0.13
    3     0.34     41              1.1         0.67              0.67        0.40 / 0.65 / 0.00

The fixtures use seed 0. Mean top-1 probability along the greedy streams: 0.26–0.43. The
random variant, for contrast: MTP accept ≈ 0, DFlash mean accept ≈ 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engines.testing import random_init
from engines.testing.random_init import Params
from engines.testing.spec import DrafterSpec, TargetSpec


@dataclass(frozen=True)
class AgreeKnobs:
    """Tuning knobs of the agree construction (see the module docstring for their role)."""

    kappa: float = 0.3  # weight of the common direction in every embedding
    a_fraction: float = 0.15  # fraction of tokens x whose bigram successor is A (the set P(A))
    phi_degrees: float = 45.0  # angle of P(A) embeddings towards d
    logit_scale: float = 1.0  # multiplies the whole lm_head: a temperature; greedy choices unchanged
    beta: float = 1.0  # bigram lm_head strength
    runner_up: tuple[float, float] = (0.93, 1.0)  # range of ρ_x, the g2 branch's relative weight
    beta_a: float = 2.5  # strength of the A row along d
    regulator: float = 0.3  # how hard the A logit is pushed down by the recent share of A
    regulator_write: float = 0.15  # β_reg: EMA write strength (window ≈ 1/β_reg tokens)
    hash_weight: float = 0.2  # weight of each token's ±1 hash bit in its embedding
    coin: float = 0.2  # size of the context coin written along b (layer 1)
    coin_write: float = 0.3  # EMA write strength of the coin
    branch: float = 1.0  # how strongly lm_head rows read the coin (random sign per row)
    layer_scale: float = 0.35  # output scale of the target's random layer parts
    mtp_layer_scale: float = 0.1
    drafter_layer_scale: float = 0.05
    a_token: str = "Ġthe"  # the token A (byte-level spelling); falls back to id 300


@dataclass(frozen=True)
class Geometry:
    common: np.ndarray  # c, (H,)
    a_dir: np.ndarray  # d, (H,)
    hash_dir: np.ndarray  # carries each token's random ±1 bit
    branch_dir: np.ndarray  # b: where the coin is written; lm_head rows read it with random signs
    token_dirs: np.ndarray  # r_x, (V, H)
    embed_units: np.ndarray  # e_x, (V, H) unit rows
    first: np.ndarray  # g1, (V,)
    second: np.ndarray  # g2, (V,)
    a_set: np.ndarray  # bool (V,) membership in P(A)
    a_id: int
    s: float  # weight of the token's own direction: sqrt(1 − κ² − hash_weight²)


def build_geometry(rng: np.random.Generator, spec: TargetSpec, knobs: AgreeKnobs, a_id: int,
                   mask_id: int, special_ids: list[int]) -> Geometry:
    h, v = spec.hidden_size, spec.vocab_size
    basis, _ = np.linalg.qr(rng.standard_normal((h, h)))
    common, a_dir, a_ind, hash_dir, branch_dir = (basis[:, i] for i in range(5))
    token_dirs = rng.standard_normal((v, h - 5)) @ basis[:, 5:].T
    token_dirs /= np.linalg.norm(token_dirs, axis=1, keepdims=True)
    token_dirs[a_id] = a_ind  # only A carries i_A: the regulator reads it exactly

    normal_ids = np.array([i for i in range(v) if i not in special_ids])
    first = np.empty(v, dtype=np.int64)
    second = np.empty(v, dtype=np.int64)
    first[normal_ids] = rng.permutation(normal_ids)
    second[normal_ids] = rng.permutation(normal_ids)
    first[special_ids] = rng.choice(normal_ids, size=len(special_ids), replace=False)
    second[special_ids] = rng.choice(normal_ids, size=len(special_ids), replace=False)
    clash = first == second
    second[clash] = normal_ids[(np.searchsorted(normal_ids, second[clash]) + 1) % len(normal_ids)]

    a_set = np.zeros(v, dtype=bool)
    a_set[rng.choice(normal_ids, size=int(knobs.a_fraction * len(normal_ids)), replace=False)] = True
    a_set[a_id] = True
    a_set[special_ids] = False

    phi = np.deg2rad(knobs.phi_degrees)
    s = float(np.sqrt(1.0 - knobs.kappa**2 - knobs.hash_weight**2))
    mixed = np.where(a_set[:, None], np.cos(phi) * token_dirs + np.sin(phi) * a_dir, token_dirs)
    bits = rng.choice([-1.0, 1.0], size=v)
    embed_units = knobs.kappa * common + s * mixed + knobs.hash_weight * bits[:, None] * hash_dir
    embed_units[mask_id] = knobs.kappa * common + s * a_dir
    return Geometry(common, a_dir, hash_dir, branch_dir, token_dirs, embed_units, first, second, a_set, a_id, s)


def target_params(rng: np.random.Generator, spec: TargetSpec, knobs: AgreeKnobs, geo: Geometry,
                  special_ids: list[int]) -> Params:
    h = spec.hidden_size
    params = random_init.target_layers(rng, spec, knobs.layer_scale)
    params["model.embed_tokens.weight"] = (np.sqrt(h) * geo.embed_units).astype(np.float32)
    params["model.norm.weight"] = random_init.norm_weight(rng, h, spread=0.02)

    lm_head = np.zeros((spec.vocab_size, h))
    rho = rng.uniform(*knobs.runner_up, size=spec.vocab_size)
    np.add.at(lm_head, geo.first, knobs.beta * geo.token_dirs)
    np.add.at(lm_head, geo.second, knobs.beta * rho[:, None] * geo.token_dirs)
    lm_head[geo.a_id] += knobs.beta_a * geo.a_dir
    signs = rng.choice([-1.0, 1.0], size=(spec.vocab_size, 1))
    signs[geo.a_id] = 0.0  # A's own logit stays coin-free: the regulator alone ends A-runs
    lm_head += knobs.branch * signs * geo.branch_dir
    lm_head[special_ids] = 0.0  # the bigram chain never emits control tokens
    params["lm_head.weight"] = (knobs.logit_scale * lm_head).astype(np.float32)

    _install_regulator(params, spec, knobs, geo)
    _install_coin(params, spec, knobs, geo)
    return params


def _install_regulator(params: Params, spec: TargetSpec, knobs: AgreeKnobs, geo: Geometry) -> None:
    """Layer 0: EMA share m of token A; pushes −regulator·y0(m) along d (ends A-runs)."""
    h = spec.hidden_size
    is_a = geo.token_dirs[geo.a_id] / (np.sqrt(h) * geo.s * np.cos(np.deg2rad(knobs.phi_degrees)))
    not_a = geo.common / (np.sqrt(h) * knobs.kappa) - is_a
    _install_ema_head(params, spec, layer=0, positive=is_a, negative=not_a, write=knobs.regulator_write,
                      const=geo.common / (np.sqrt(h) * knobs.kappa),
                      out_positive=-knobs.regulator * geo.a_dir, out_negative=np.zeros(h))


def _install_coin(params: Params, spec: TargetSpec, knobs: AgreeKnobs, geo: Geometry) -> None:
    """Layer 1: EMA share of tokens with hash bit +1 vs −1; writes ±coin·b (picks bigram branches)."""
    h = spec.hidden_size
    bit = geo.hash_dir / (np.sqrt(h) * knobs.hash_weight)  # reads ±1
    _install_ema_head(params, spec, layer=1, positive=bit, negative=-bit, write=knobs.coin_write,
                      const=geo.common / (np.sqrt(h) * knobs.kappa),
                      out_positive=knobs.coin * geo.branch_dir, out_negative=-knobs.coin * geo.branch_dir)


def _install_ema_head(params: Params, spec: TargetSpec, *, layer: int, positive: np.ndarray, negative: np.ndarray,
                      write: float, const: np.ndarray, out_positive: np.ndarray, out_negative: np.ndarray) -> None:
    """Make value head 0 (key head 0) of GDN layer `layer` an exponential moving average.

    Constant unit key and query (from the common direction), no decay, write strength β = `write`:
    the state along the key is the EMA (factor 1 − β) of v. v0 = silu(4·⟨x, positive⟩),
    v1 = silu(4·⟨x, negative⟩) (readouts that are 1 or 0 on embeddings). With m the EMA share of
    "positive" tokens, the gated RMSNorm yields y0 = K·m/√(m² + (1 − m)²), y1 likewise with 1 − m
    (K ≈ 11.4), and out_proj writes y0·out_positive + y1·out_negative into the residual stream.
    """
    if not spec.is_linear(layer):
        raise ValueError(f"the agree construction needs a GatedDeltaNet layer {layer}")
    p = f"model.layers.{layer}."
    params[p + "input_layernorm.weight"][:] = 1.0
    dk, dv = spec.linear_key_head_dim, spec.linear_value_head_dim
    q_row, k_row, v_row = 0, spec.linear_key_dim, 2 * spec.linear_key_dim
    qkv = params[p + "linear_attn.in_proj_qkv.weight"]
    qkv[q_row:q_row + dk] = 0.0
    qkv[k_row:k_row + dk] = 0.0
    qkv[v_row:v_row + dv] = 0.0
    qkv[q_row] = qkv[k_row] = 2.0 * const  # silu(2) > 0, then l2-normalised: a constant unit key
    qkv[v_row] = 4.0 * positive
    qkv[v_row + 1] = 4.0 * negative
    conv = params[p + "linear_attn.conv1d.weight"]
    for channel in (q_row, k_row, v_row, v_row + 1):
        conv[channel] = 0.0
        conv[channel, 0, -1] = 1.0  # current position only
    params[p + "linear_attn.in_proj_a.weight"][0] = 0.0
    params[p + "linear_attn.A_log"][0] = np.log(1e-4)  # no decay: exp(-1e-4·softplus(·)) ≈ 1
    params[p + "linear_attn.in_proj_b.weight"][0] = np.log(write / (1.0 - write)) * const
    params[p + "linear_attn.in_proj_z.weight"][0:dv] = 0.0
    params[p + "linear_attn.in_proj_z.weight"][0:2] = 3.0 * const  # silu(3) ≈ 2.86, constant gates
    params[p + "linear_attn.norm.weight"][0:2] = 1.0
    out = params[p + "linear_attn.out_proj.weight"]
    out[:, 0:dv] = 0.0
    out[:, 0] = out_positive
    out[:, 1] = out_negative


def mtp_params(rng: np.random.Generator, spec: TargetSpec, knobs: AgreeKnobs, geo: Geometry,
               final_norm: np.ndarray) -> Params:
    h = spec.hidden_size
    params = random_init.mtp_head(rng, spec, knobs.mtp_layer_scale)
    fc = np.zeros((h, 2 * h), dtype=np.float32)
    fc[:, :h] = np.eye(h)  # [embedding | hidden] order: the embedding of x_{t+1} ...
    fc[:, h:] = np.outer(geo.branch_dir, geo.branch_dir)  # ... plus the coin read from H_t
    params["mtp.fc.weight"] = fc
    params["mtp.pre_fc_norm_embedding.weight"] = np.ones(h, dtype=np.float32)
    params["mtp.norm.weight"] = final_norm.copy()
    return params


def drafter_params(rng: np.random.Generator, hidden: int, spec: DrafterSpec, knobs: AgreeKnobs) -> Params:
    params = random_init.drafter(rng, hidden, spec, knobs.drafter_layer_scale)
    params["norm.weight"] = np.ones(hidden, dtype=np.float32)
    return params
