"""The secondary scheduler for pods with `schedulerName: voda-scheduler`.

Plain batch Jobs (gangs) and inference Deployments placed with the placement
manager the elastic backend uses, on the same cluster view. The decision part
(model, hints, filters, config, decide) is pure; read turns Kubernetes objects
into its values. See docs/design/007-secondary-scheduler.md.
"""
