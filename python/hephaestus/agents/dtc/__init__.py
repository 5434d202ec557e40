"""DTC (Dual-Timescale Competence), part 1: RSSM world-model ensemble, on-device replay and the
dual-timescale intrinsic reward, as pipeline stages (`world_model`, `intrinsic_reward`). See specs/dtc.md."""
