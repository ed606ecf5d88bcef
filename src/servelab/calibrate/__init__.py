"""Calibration: fit engine overhead profiles (predict/data/calibrated.json) on measured end-to-end runs, and a
system's roofline efficiencies (perfdb/data/efficiencies.json) on its collected perf tables.

Modules by job: `rows` maps measured rows onto servelab's specs, `aic` fetches AIConfigurator's sample rows
and answers, `params` names the fitted parameters, `price` prices a row with the predictor, `fit` minimises
the loss, `crossval` leaves one model out, `calibration_file` writes the versioned calibration, `engines` runs
the engine fit end to end, and `roofline` fits the roofline's efficiencies.
"""
