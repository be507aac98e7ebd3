"""The image canvas without a browser: frame logic (pure) and the widget's message protocol.

The browser side is checked in ``test_canvas_browser.py``; here the kernel side talks to a
recorded ``send`` and to browser messages fed to its handler, as anywidget's own tests do.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tsexplore.controller import to_uint8
from tsexplore.errors import ConfigError
from tsexplore.ui._frames import (
    CodecCosts,
    FrameFlow,
    LinkEstimator,
    choose_encoding,
    compose_lut,
    decode_payload,
    encode_indices,
    fit_view,
    frame_extent,
    to_indices,
    value_of_index,
)

pytest.importorskip("anywidget")
pytest.importorskip("holoviews")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# -- pure frame logic --------------------------------------------------------------------------


def test_indices_and_the_range_they_came_from():
    plane = np.array([[0.0, 1.0, np.nan], [2.0, -5.0, 10.0]], np.float32)
    idx, rng = to_indices(plane, (0.0, 2.0))
    assert rng == (0.0, 2.0) and idx.dtype == np.uint8
    assert idx.tolist() == [[1, 128, 0], [255, 1, 255]]
    # each index stands for the value at its centre: back within half a step
    v = value_of_index(idx, rng)
    assert np.isnan(v[0, 2])
    assert abs(v[0, 1] - 1.0) <= 2.0 / 254 / 2 + 1e-12
    with pytest.raises(ConfigError, match="2-D"):
        to_indices(np.zeros(3), (0, 1))
    with pytest.raises(ConfigError, match="max > min"):
        to_indices(np.zeros((2, 2)), (1, 1))


@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_a_narrow_range_far_from_zero_keeps_its_254_steps(dtype):
    """Pressure-like values (101325 + a range of 0.05, or ints near 10^12 spanning 254): the
    offset is taken in the data's precision; in float32 the range kept a few steps (the
    property test below found it at 512.85 + 0.06)."""
    lo = 101325.0 if dtype == "float64" else 10.0**12
    span = 0.05 if dtype == "float64" else 254.0
    values = np.linspace(lo, lo + span, 2000) if dtype == "float64" else lo + np.arange(255)
    values = values.astype(dtype)
    got = to_uint8(values, (lo, lo + span)).astype(int)
    want = np.floor(np.clip((values - lo) * (254 / span), 0, 254) + 1.5).astype(int)
    assert np.abs(got - want).max() <= 1
    assert len(np.unique(got)) == 255


@pytest.mark.parametrize(("lo", "span"), [(512.85, 0.11), (512.85, 1.7), (7777.7, 1.7)])
def test_the_histogram_of_a_narrow_float64_range_far_from_zero_is_numpys(lo, span):
    """(Taking the offset in float32 put 50-400 of these 10,000 values in the wrong bins.)"""
    from tsexplore.controller.colour import HIST_BINS, frame_histogram

    values = lo + np.random.default_rng(3).uniform(0, span, 10_000)  # > 4096: the float32 path
    h = frame_histogram(values, (lo, lo + span))
    np.testing.assert_array_equal(h.counts, np.histogram(values, HIST_BINS, h.range)[0])


@settings(max_examples=60, deadline=None)
@given(lo=st.floats(-1e3, 1e3), span=st.floats(1e-2, 1e3), dlo=st.floats(-1e3, 1e3),
       dspan=st.floats(1e-2, 1e3))
def test_compose_lut_recolours_like_requantising(lo, span, dlo, dspan):
    """Showing indices of range A in the colours of range B picks, for each index, the colour
    that quantising its value over B gives (the kernel's own quantiser: at most one index
    apart, where float32 and float64 round a tie differently)."""
    pal = np.zeros((256, 4), np.uint8)
    pal[:, 0] = np.arange(256)  # the red channel says which colour index was used
    fc, dc = (lo, lo + span), (dlo, dlo + dspan)
    lut = compose_lut(pal, fc, dc)
    values = value_of_index(np.arange(1, 256), fc)
    want = to_uint8(values, dc).astype(int)
    got = lut[1:, 0].astype(int)
    assert np.abs(got - want).max() <= 1
    assert (np.diff(got) >= 0).all()  # a monotonic colour scale stays monotonic
    assert (got[values <= dc[0]] == 1).all() and (got[values >= dc[1]] == 255).all()
    assert lut[0, 0] == 0  # NaN stays NaN
    assert (compose_lut(pal, fc, None) == pal).all() and (compose_lut(pal, fc, fc) == pal).all()


def test_extent_and_square_pixel_view():
    assert frame_extent(0, 10, 1) == (-0.5, 9.5)
    assert frame_extent(4, 20, 4) == (3.5, 19.5)  # 4 samples, 4 pixels wide each
    assert frame_extent(4, 19, 4) == (3.5, 19.5)
    # a 100 x 400 plane on a 300 x 300 box: x fills it, y is widened about its centre
    (y0, y1), (x0, x1) = fit_view(((-0.5, 99.5), (-0.5, 399.5)), (300, 300))
    assert (x0, x1) == (-0.5, 399.5)
    assert y1 - y0 == pytest.approx(400) and (y0 + y1) / 2 == pytest.approx(49.5)


@pytest.mark.parametrize("encoding", ["raw", "png", "webp"])
def test_encodings_are_lossless(encoding):
    idx = np.random.default_rng(1).integers(0, 256, (37, 53), dtype=np.uint8)
    frame = encode_indices(idx, encoding)
    assert frame.encoding == encoding and frame.shape == (37, 53)
    np.testing.assert_array_equal(decode_payload(frame), idx)
    with pytest.raises(ConfigError, match="encoding"):
        encode_indices(idx, "jpeg")


def test_link_estimate_from_acks():
    link = LinkEstimator()
    assert link.bandwidth is None and link.predict(10**6) is None
    latency, bw = 0.004, 20e6
    for n in (1000, 2**20, 2**20, 3 * 2**20, 2000):
        link.record(n, latency + n / bw)
    assert link.latency == pytest.approx(latency, rel=0.05)
    assert link.bandwidth == pytest.approx(bw, rel=0.05)
    assert link.predict(2**20) == pytest.approx(latency + 2**20 / bw, rel=0.05)


def test_encoding_follows_the_measured_link():
    costs = CodecCosts()
    n = 2**20
    unknown = LinkEstimator()
    assert choose_encoding(n, unknown, costs) == "raw"
    fast, slow = LinkEstimator(), LinkEstimator()
    for _ in range(4):
        fast.record(n, 0.002 + n / 200e6)
        slow.record(n, 0.002 + n / 5e6)
    assert choose_encoding(n, fast, costs) == "raw"
    assert choose_encoding(n, slow, costs) in ("png", "webp")
    # a busy local link: 1 MiB frames of one size, acked after 20-60 ms, stay raw; and small
    # frames always travel raw, however slow their acks (75 ms for 64 kB here)
    busy, small = LinkEstimator(), LinkEstimator()
    for k in range(8):
        busy.record(n, 0.02 + 0.04 * (k % 4 != 0))
        small.record(65536, 0.075)
    assert choose_encoding(n, busy, costs) == "raw"
    assert choose_encoding(65536, small, costs) == "raw"
    # a loaded machine: most 1 MiB acks late (90 ms), one in four at the link's speed: the
    # link is fast, the machine busy -- compressing would only add CPU work
    loaded = LinkEstimator()
    for k in range(16):
        loaded.record(n, 0.002 + (0.09 if k % 4 else n / 200e6))
    assert choose_encoding(n, loaded, costs) == "raw"
    assert choose_encoding(n, slow, costs, allowed=("raw",)) == "raw"
    # measured costs replace the priors: a codec that barely compresses is not worth it
    bad = encode_indices(np.random.default_rng(2).integers(0, 256, (256, 256), dtype=np.uint8), "png")
    for _ in range(8):
        costs.record(bad)
    assert costs.ratio["png"] > 0.9
    assert choose_encoding(n, slow, costs, allowed=("raw", "png")) == "raw"


def test_flow_keeps_one_frame_in_flight_and_the_newest_waiting():
    clock = Clock()
    flow: FrameFlow[str] = FrameFlow(ack_timeout=5.0, clock=clock)
    assert flow.offer("a", 100) == (1, "a")
    assert flow.offer("b", 100) is None
    assert flow.offer("c", 100) is None  # b is dropped, c waits
    clock.t = 0.010
    assert flow.ack(7) is None  # not the frame in flight
    assert flow.ack(1) == (2, "c")
    assert flow.counts() == {"sent": 2, "acked": 1, "dropped": 1, "lost": 0, "pending": 0}
    assert flow.link.frames == 1
    # tiles queue behind each other; a replacing frame drops them all
    assert flow.offer("t1", 1, queue=True) is None
    assert flow.offer("t2", 1, queue=True) is None
    assert flow.ack(2) == (3, "t1")
    assert flow.ack(3) == (4, "t2")
    assert flow.offer("t3", 1, queue=True) is None
    assert flow.offer("full", 1) is None
    assert flow.ack(4) == (5, "full")
    # an ack that never comes (the view was closed) does not stall the flow
    assert flow.offer("late", 1) is None
    clock.t = 10.0
    assert flow.poll() == (6, "late")
    assert flow.counts()["lost"] == 1


# -- the widget, kernel side --------------------------------------------------------------------


@pytest.fixture
def canvas():
    from tsexplore.ui.canvas import ImageCanvas

    c = ImageCanvas(shape=(30, 40), width=40, height=30, dispatch=None)
    c.sent = []
    c.send = lambda content, buffers=None: c.sent.append((content, buffers))
    yield c
    c.close()


def browser(c, **content):
    c._on_browser(c, content, [])


def frames(c):
    return [(m, b) for m, b in c.sent if m.get("type") == "frame"]


def test_frame_message_carries_indices_extent_and_range(canvas):
    plane = np.linspace(0, 1, 30 * 40, dtype=np.float32).reshape(30, 40)
    rng = canvas.show_plane(plane, label="t=0", index=0)
    (meta, buffers), = frames(canvas)
    assert meta["shape"] == [30, 40] and meta["extent"] == [[-0.5, 29.5], [-0.5, 39.5]]
    assert meta["clim"] == list(rng) and meta["encoding"] == "raw" and meta["ack"] == "now"
    assert meta["label"] == "t=0" and meta["index"] == 0 and meta["seq"] == 1
    got = np.frombuffer(bytes(buffers[0]), np.uint8).reshape(30, 40)
    np.testing.assert_array_equal(got, to_uint8(plane, rng))


def test_one_frame_in_flight_newest_after_the_ack(canvas):
    idx = np.zeros((30, 40), np.uint8)
    for k in range(5):
        canvas.show(idx + k, label=f"f{k}")
    assert len(frames(canvas)) == 1
    browser(canvas, type="ack", ack=1, held=0.3)
    sent = frames(canvas)
    assert [m["label"] for m, _ in sent] == ["f0", "f4"]  # f1..f3 never travelled
    assert canvas.stats()["flow"]["dropped"] == 3
    # the same buffer may be reused by the caller: what was sent does not change
    buf = np.full((30, 40), 9, np.uint8)
    browser(canvas, type="ack", ack=2)
    canvas.show(buf)
    buf[:] = 0
    assert bytes(frames(canvas)[-1][1][0])[:1] == b"\x09"


def test_browser_messages_become_traits_and_callbacks(canvas):
    seen = []
    canvas.observe(lambda ch: seen.append(("viewport", ch["new"])), "viewport")
    canvas.on_pixel(lambda p: seen.append(("pixel", p)))
    canvas.on_index(lambda v: seen.append(("index", v)))
    browser(canvas, type="viewport", x=[-0.5, 19.5], y=[4.5, 19.5], width=80, height=60)
    browser(canvas, type="pixel", ix=3, iy=4, x=3.2, y=4.4)
    browser(canvas, type="index", dim="time", value=7)
    assert seen == [
        ("viewport", {"y": (4.5, 19.5), "x": (-0.5, 19.5), "height": 60, "width": 80}),
        ("pixel", {"iy": 4, "ix": 3, "y": 4.4, "x": 3.2}),
        ("index", 7),
    ]
    assert canvas.slider_value == 7
    assert not [m for m, _ in canvas.sent if m.get("type") == "index"]  # no echo to the browser
    canvas.slider_value = 9  # set in the kernel: the browser's slider follows
    assert canvas.sent[-1] == ({"type": "index", "value": 9}, None)
    canvas.set_view((0, 10), None)
    assert canvas.sent[-1] == ({"type": "view", "y": [0.0, 10.0], "x": [-0.5, 39.5]}, None)


def test_exact_hover_readout(canvas):
    canvas.on_hover(lambda iy, ix: f"value = {iy * 100 + ix}")
    assert canvas.hover_exact
    browser(canvas, type="hover", iy=2, ix=5)
    assert canvas.sent[-1][0] == {"type": "hover", "iy": 2, "ix": 5, "text": "value = 205"}


def labels(message):
    meta, _ = message
    return [meta["label"]] + [p["label"] for p in meta.get("more", [])]


def test_a_new_view_gets_the_picture_again(canvas):
    idx = np.zeros((30, 40), np.uint8)
    canvas.show(idx, label="overview", mode="base", generation=1)
    browser(canvas, type="ack", ack=1)
    canvas.show(idx[:10, :10], ((-0.5, 9.5), (-0.5, 9.5)), label="tile a", mode="tile", generation=2)
    browser(canvas, type="ack", ack=2)
    canvas.show(idx[:10, :10], ((9.5, 19.5), (-0.5, 9.5)), label="tile b", mode="tile", generation=2)
    canvas.sent.clear()
    browser(canvas, type="ready", x=[-0.5, 39.5], y=[-0.5, 29.5], width=40, height=30)
    (message,) = frames(canvas)  # the whole picture in one message
    assert labels(message) == ["overview", "tile a", "tile b"] and len(message[1]) == 3
    # a new generation replaces the tiles (the base stays until a new base comes)
    browser(canvas, type="ack", ack=frames(canvas)[-1][0]["seq"])
    canvas.show(idx, label="new", generation=3)
    browser(canvas, type="ack", ack=frames(canvas)[-1][0]["seq"])
    canvas.sent.clear()
    browser(canvas, type="ready", x=[-0.5, 39.5], y=[-0.5, 29.5], width=40, height=30)
    assert [labels(m) for m in frames(canvas)] == [["overview", "new"]]


def test_waiting_for_the_browser_sends_each_frame_once():
    from tsexplore.ui.canvas import ImageCanvas

    c = ImageCanvas(shape=(30, 40), width=40, height=30, dispatch=None, wait_ready=True)
    c.sent = []
    c.send = lambda content, buffers=None: c.sent.append((content, buffers))
    idx = np.zeros((30, 40), np.uint8)
    c.show(idx, label="base", mode="base", generation=1)
    c.show(idx, label="t1", mode="tile", generation=1)
    assert frames(c) == [] and [m["label"] for m, _ in c.picture()] == ["base", "t1"]
    browser(c, type="ready", x=[-0.5, 39.5], y=[-0.5, 29.5], width=40, height=30)
    assert [labels(m) for m in frames(c)] == [["base", "t1"]]
    browser(c, type="ack", ack=frames(c)[-1][0]["seq"])
    c.show(idx, label="next", generation=2)  # from now on, as any canvas
    assert labels(frames(c)[-1]) == ["next"]
    c.close()


def test_lazy_acks_ride_on_the_next_message(canvas):
    canvas.ack_policy = "lazy"
    idx = np.zeros((30, 40), np.uint8)
    canvas.show(idx, label="a")
    assert frames(canvas)[-1][0]["ack"] == "lazy"
    # the browser's slider move carries the ack; the kernel answers with the next frame at once
    canvas.on_index(lambda v: canvas.show(idx + v, label=f"i{v}"))
    browser(canvas, type="index", value=3, ack=1, held=12.0)
    assert frames(canvas)[-1][0]["label"] == "i3"
    assert canvas.stats()["flow"]["acked"] == 1
    # a frame made in the kernel while the ack is held asks for it once
    canvas.show(idx, label="b")
    canvas.show(idx, label="c")
    assert [m for m, _ in canvas.sent].count({"type": "ack?"}) == 1
    browser(canvas, type="ack", ack=2)
    assert frames(canvas)[-1][0]["label"] == "c"


def test_compressed_frames_when_asked(canvas):
    canvas.encoding = "png"
    idx = np.random.default_rng(3).integers(0, 256, (30, 40), dtype=np.uint8)
    canvas.show(idx)
    meta, buffers = frames(canvas)[-1]
    assert meta["encoding"] == "png"
    import io

    from PIL import Image

    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(bytes(buffers[0])))), idx)


def test_bad_arguments(canvas):
    from tsexplore.ui.canvas import ImageCanvas

    with pytest.raises(ConfigError, match="mode"):
        canvas.show(np.zeros((2, 2), np.uint8), mode="overlay")
    with pytest.raises(ConfigError, match="2-D"):
        canvas.show(np.zeros(4, np.uint8))
    with pytest.raises(ConfigError, match="cmap"):
        ImageCanvas(cmap="nope")


def test_server_extension_sets_nodelay_on_kernel_websockets():
    pytest.importorskip("jupyter_server")
    import logging
    from types import SimpleNamespace

    from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

    from tsexplore import jupyter_server_ext as ext

    app = SimpleNamespace(web_app=SimpleNamespace(settings={}), log=logging.getLogger("test"))
    ext._load_jupyter_server_extension(app)
    cls = app.web_app.settings["kernel_websocket_connection_class"]
    assert issubclass(cls, ZMQChannelsWebsocketConnection) and cls._tse_nodelay
    ext._load_jupyter_server_extension(app)  # loading twice wraps once
    assert app.web_app.settings["kernel_websocket_connection_class"] is cls
    calls = []
    handler = SimpleNamespace(ws_connection=object(), set_nodelay=calls.append)
    assert ext.set_nodelay(SimpleNamespace(websocket_handler=handler, log=None))
    assert calls == [True]
    assert not ext.set_nodelay(SimpleNamespace(websocket_handler=None))


def test_tiles_waiting_behind_one_in_flight_travel_together(canvas):
    idx = np.arange(100, dtype=np.uint8).reshape(10, 10)
    canvas.show(idx, label="first", generation=1)
    for k in range(4):  # tiles of generation 2 arrive while a frame is in flight
        canvas.show(idx + k, ((10 * k - 0.5, 10 * k + 9.5), (-0.5, 9.5)), label=f"t{k}", mode="tile",
                    generation=2, final=k == 3)
    assert [m["label"] for m, _ in frames(canvas)] == ["first"]
    browser(canvas, type="ack", ack=1)
    (meta, buffers), = frames(canvas)[1:]
    # one message: the first tile, the others in "more", one buffer each, in order
    assert meta["label"] == "t0" and [p["label"] for p in meta["more"]] == ["t1", "t2", "t3"]
    assert [p["final"] for p in meta["more"]] == [False, False, True]
    assert meta["more"][1]["extent"] == [[19.5, 29.5], [-0.5, 9.5]]
    for k, b in enumerate(buffers):
        np.testing.assert_array_equal(np.frombuffer(bytes(b), np.uint8).reshape(10, 10), idx + k)
    assert canvas.stats()["flow"]["sent"] == 2 and canvas.stats()["by_encoding"]["raw"] == 5
    # a replacing frame waiting behind a tile is not taken along
    browser(canvas, type="ack", ack=2)
    canvas.show(idx, label="t9", mode="tile", generation=3)
    canvas.show(idx, label="new", generation=4)
    browser(canvas, type="ack", ack=3)
    assert "more" not in frames(canvas)[-1][0] and frames(canvas)[-1][0]["label"] == "new"
    # a base sent from another thread takes along the tiles that came before it left
    browser(canvas, type="ack", ack=4)
    canvas._home = -1  # as if called on the controller's thread: the send is handed over
    held = []
    canvas.dispatch = lambda fn, *args: held.append((fn, args))
    canvas.show(idx, label="b5", mode="base", generation=5)
    canvas.show(idx, label="t5", mode="tile", generation=5, final=True)
    for fn, args in held:
        fn(*args)
    meta, buffers = frames(canvas)[-1]
    assert meta["label"] == "b5" and [p["label"] for p in meta["more"]] == ["t5"] and len(buffers) == 2
