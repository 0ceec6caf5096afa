/**
 * The soak's samples as a PNG (a person reads a line faster than 60 rows): Vega-Lite draws the SVG (no canvas in
 * Node: vega's headless SVG renderer), resvg (WebAssembly, no native binary) rasterises it with a system font if
 * one is found (DejaVu Sans, as Debian ships it); without one the text is left out.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import { initWasm, Resvg } from '@resvg/resvg-wasm';
import * as vega from 'vega';
import { compile } from 'vega-lite';

import type { SoakResult } from './soak.js';

const FONTS = ['/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf', '/usr/share/fonts/dejavu/DejaVuSans.ttf'];

export async function soakPlot(result: SoakResult, file: string): Promise<void> {
  const rows = result.samples.flatMap((s) => [
    { minute: s.minute, panel: 'RSS MB', series: 'api', value: s.apiRssMb },
    { minute: s.minute, panel: 'RSS MB', series: 'worker', value: s.workerRssMb },
    ...Object.keys(s.tablesMb).map((t) => ({
      minute: s.minute,
      panel: 'table + indexes MB',
      series: t,
      value: s.tablesMb[t] + s.indexesMb[t],
    })),
    { minute: s.minute, panel: 'create p99 ms', series: 'p99', value: s.createP99Ms },
  ]);
  const spec = compile({
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: `soak: ${result.rate} creates/s, provider 1 s, retention ${result.retentionMinutes} min, ${result.minutes} min`,
    data: { values: rows },
    facet: { row: { field: 'panel', type: 'nominal', title: null } },
    spec: {
      width: 640,
      height: 150,
      mark: { type: 'line', point: true },
      encoding: {
        x: { field: 'minute', type: 'quantitative', title: 'minute' },
        y: { field: 'value', type: 'quantitative', title: null },
        color: { field: 'series', type: 'nominal', title: null },
      },
    },
    resolve: { scale: { y: 'independent' } },
    config: { background: 'white', font: 'DejaVu Sans' },
  } as never).spec;
  const svg = await new vega.View(vega.parse(spec), { renderer: 'none' }).toSVG();
  const wasm = readFileSync(createRequire(import.meta.url).resolve('@resvg/resvg-wasm/index_bg.wasm'));
  await initWasm(wasm).catch((error: Error) => {
    if (!/already initialized/i.test(error.message)) throw error;
  });
  const font = FONTS.find((f) => existsSync(f));
  const png = new Resvg(svg, {
    fitTo: { mode: 'zoom', value: 1.5 },
    font: { fontBuffers: font ? [readFileSync(font)] : [], defaultFontFamily: 'DejaVu Sans' },
  })
    .render()
    .asPng();
  writeFileSync(file, png);
}
