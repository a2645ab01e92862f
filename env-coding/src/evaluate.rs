//! Scoring completion files (`codegym evaluate`) and checking reference solutions (`codegym tasks check`).
