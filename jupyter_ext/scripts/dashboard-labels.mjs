// Writes the dashboard's labels.js from src/words.ts with the types taken out, so that
// the dashboard and the Lab's sidebar say the same words from one source.
// `--check` compares the committed file instead of writing it.
import { readFileSync, writeFileSync } from 'node:fs';

import ts from 'typescript';

const source = new URL('../src/words.ts', import.meta.url);
const target = new URL(
  '../../controller/devboxes_controller/web/static/labels.js',
  import.meta.url
);
const header =
  '// Generated from jupyter_ext/src/words.ts by `make labels`: edit that file, not this one.\n';

const { outputText } = ts.transpileModule(readFileSync(source, 'utf8'), {
  compilerOptions: { target: ts.ScriptTarget.ES2019, module: ts.ModuleKind.ESNext },
  fileName: 'words.ts'
});
const generated = header + outputText;

if (process.argv.includes('--check')) {
  if (readFileSync(target, 'utf8') !== generated) {
    console.error('static/labels.js is not what src/words.ts makes: run `make labels`');
    process.exit(1);
  }
} else {
  writeFileSync(target, generated);
}
