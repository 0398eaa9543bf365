"""The typed layer over Kubernetes objects: what tidegate reads from them, as pure code.

Every service that looks inside a Kubernetes object reads it through here, never as a raw dict:
:mod:`~tidegate.kube.read.objects` decodes the fields tidegate needs into msgspec Structs
(a field of the wrong type is reported with its JSON path);
:mod:`~tidegate.kube.read.keys` and :mod:`~tidegate.kube.read.annotations` name and parse the
labels and annotations of the four families tidegate understands;
:mod:`~tidegate.kube.read.requests` counts a pod's requests as kube-scheduler does;
:mod:`~tidegate.kube.read.suspend` and :mod:`~tidegate.kube.read.finish` say whose suspension
it is and whether a workload ran to the end; :mod:`~tidegate.kube.read.convert` and
:mod:`~tidegate.kube.read.recognize` turn objects into :mod:`tidegate.model` messages;
:class:`~tidegate.kube.read.index.ClusterIndex` groups pods into workloads from watch events;
:class:`~tidegate.kube.read.mirror.Mirror` plans the state-stream publications that match it;
and :mod:`~tidegate.kube.read.gate` answers the mutating webhook's AdmissionReviews (who is gated).

Pure code: no I/O, no clock. The watcher feeds the index; other services decode what the API
server answers with :func:`~tidegate.kube.read.objects.decode`.
"""
